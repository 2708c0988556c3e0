#!/usr/bin/env python3
"""Helpers of bench/gateway/run.sh.

  report.py tree-rss PID         the RSS of PID and all its descendants, then of PID alone, in
                                 KiB ("TREE SELF")
  report.py tagged TAG           the pids whose environment holds MCPULSE_BENCH_TAG=TAG
  report.py free-port            a free loopback TCP port
  report.py report RESULTS.jsonl the Markdown tables of docs/benchmarks-gateway.md

RSS is summed over the processes of a tree, so pages they share (a second node child's code)
count once a process: that is what the host's memory accounting of a pod or a unit sees too.
"""
import json
import os
import socket
import statistics
import sys


def stat(pid):
    """(ppid, rss KiB) of a process, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
        with open(f"/proc/{pid}/status") as f:
            rss = next((int(l.split()[1]) for l in f if l.startswith("VmRSS:")), 0)
        return int(rest[1]), rss
    except (OSError, IndexError, ValueError):
        return None


def tree_rss(root):
    procs = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            s = stat(int(name))
            if s:
                procs[int(name)] = s
    total, todo, seen = 0, [root], set()
    while todo:
        pid = todo.pop()
        if pid in seen or pid not in procs:
            continue
        seen.add(pid)
        total += procs[pid][1]
        todo.extend(p for p, (ppid, _) in procs.items() if ppid == pid)
    return total, procs.get(root, (0, 0))[1]


def tagged(tag):
    needle = f"MCPULSE_BENCH_TAG={tag}".encode()
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    out.append(int(name))
        except OSError:
            pass
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def report(path):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    modes = list(dict.fromkeys(r["mode"] for r in rows))

    def med(xs):
        return statistics.median(xs) if xs else float("nan")

    def sel(kind, mode, **k):
        return [r for r in rows if r["kind"] == kind and r["mode"] == mode
                and all(r.get(a) == b for a, b in k.items())]

    def by_mode(kind, **k):
        """Each path's rows of one kind, in the order the paths ran."""
        for m in modes:
            ms = sel(kind, m, **k)
            if ms:
                yield m, ms

    out = []
    lat = [r for r in rows if r["kind"] == "latency"]
    if lat:
        base = med([r["p50_us"] for r in sel("latency", "direct")])
        base99 = med([r["p99_us"] for r in sel("latency", "direct")])
        runs = len(sel("latency", "direct")) or len(lat)
        out.append(f"\n**Latency: `tools/call echo`, one session, {lat[0]['n']:,} sequential calls a run** (medians over {runs} runs; *added* is the path's figure minus direct's)\n")
        out.append("| path | p50 (µs) | added at p50 | p99 (µs) | added at p99 |")
        out.append("|---|---|---|---|---|")
        for m, ms in by_mode("latency"):
            p50, p99 = med([r["p50_us"] for r in ms]), med([r["p99_us"] for r in ms])
            add = "" if m == "direct" else f"{p50 - base:+.0f} µs"
            add99 = "" if m == "direct" else f"{p99 - base99:+.0f} µs"
            out.append(f"| {m} | {p50:.0f} | {add} | {p99:.0f} | {add99} |")

    pair = [r for r in rows if r["kind"] == "paired"]
    if pair:
        runs = len(sel("paired", "direct")) or 1
        out.append(f"\n**Latency, paired: every path up at once, one session each, {pair[0]['n']:,} rounds of one `tools/call echo` per path in turn** (medians over {runs} runs; *added* is the median of the path's latency minus the first path's ({modes[0]}) in the same round: the figure for the latency target)\n")
        out.append("| path | p50 (µs) | p99 (µs) | added at p50 (paired) |")
        out.append("|---|---|---|---|")
        for m, ms in by_mode("paired"):
            p50, p99 = med([r["p50_us"] for r in ms]), med([r["p99_us"] for r in ms])
            add = "" if m == "direct" else f"{med([r['added_p50_us'] for r in ms]):+.0f} µs"
            out.append(f"| {m} | {p50:.0f} | {p99:.0f} | {add} |")

    burst = [r for r in rows if r["kind"] == "burst"]
    if burst:
        first = modes[0]
        secs = burst[0]["seconds"]
        # The first path's burst of the same round, rotation and concurrency.
        base = {(r["round"], r["rotation"], r["concurrency"]): r["calls_per_s"]
                for r in burst if r["mode"] == first}
        rots = len({(r["round"], r["rotation"]) for r in burst})
        out.append(f"\n**Throughput, interleaved: every path up at once; {rots} rotations of a burst of about {secs:.0f} s per path (C = 1, then C = 32), the paths in turn** (medians; *of {first}* is the median of the path's calls/s over {first}'s in the same rotation: the figure for the throughput target)\n")
        out.append(f"| path | C=1 calls/s | of {first} | C=32 calls/s | of {first} | errors |")
        out.append("|---|---|---|---|---|---|")
        for m, ms in by_mode("burst"):
            cells = []
            for c in (1, 32):
                mc = [r for r in ms if r["concurrency"] == c]
                ratios = [r["calls_per_s"] / base[(r["round"], r["rotation"], c)]
                          for r in mc if base.get((r["round"], r["rotation"], c))]
                cells.append(f"{med([r['calls_per_s'] for r in mc]):.0f}")
                cells.append("" if m == first else f"{100 * med(ratios):.0f}%")
            errors = sum(r["errors"] for r in ms)
            out.append(f"| {m} | {' | '.join(cells)} | {errors} |")

    thr = [r for r in rows if r["kind"] == "throughput"]
    if thr:
        secs = thr[0]["seconds"]
        out.append(f"\n**Throughput: `tools/call echo` back to back for about {secs:.0f} s; concurrency C = C client sessions at once** (medians; errors summed over the runs)\n")
        out.append("| path | C=1 calls/s | of direct | C=32 calls/s | of direct | errors |")
        out.append("|---|---|---|---|---|---|")
        b1 = med([r["calls_per_s"] for r in sel("throughput", "direct", concurrency=1)])
        b32 = med([r["calls_per_s"] for r in sel("throughput", "direct", concurrency=32)])
        for m, ms in by_mode("throughput"):
            v1 = med([r["calls_per_s"] for r in ms if r["concurrency"] == 1])
            v32 = med([r["calls_per_s"] for r in ms if r["concurrency"] == 32])
            errors = sum(r["errors"] for r in ms)
            first = next((r["first_error"] for r in ms if r.get("first_error")), "")
            err = f"{errors}" + (f" (`{first[:80]}`)" if first else "")
            out.append(f"| {m} | {v1:.0f} | {100 * v1 / b1:.0f}% | {v32:.0f} | {100 * v32 / b32:.0f}% | {err} |")

    mem = [r for r in rows if r["kind"] == "memory"]
    if mem:
        n = mem[0]["sessions"]
        out.append(f"\n**Memory: RSS of the path's process tree, before and with {n} idle sessions open** (medians; *per session* = the difference / {n})\n")
        out.append(f"| path | RSS, no session (MiB) | RSS, {n} idle sessions (MiB) | per idle session (KiB) | of which the bridge process itself (KiB) |")
        out.append("|---|---|---|---|---|")
        for m, ms in by_mode("memory"):
            r0, rn = med([r["rss0_kib"] for r in ms]), med([r["rssn_kib"] for r in ms])
            per = med([(r["rssn_kib"] - r["rss0_kib"]) / r["sessions"] for r in ms])
            own = med([(r["selfn_kib"] - r["self0_kib"]) / r["sessions"] for r in ms])
            out.append(f"| {m} | {r0 / 1024:.1f} | {rn / 1024:.1f} | {per:,.0f} | {own:,.0f} |")
    print("\n".join(out))


def main():
    what = sys.argv[1]
    if what == "tree-rss":
        print(*tree_rss(int(sys.argv[2])))
    elif what == "tagged":
        print(" ".join(str(p) for p in tagged(sys.argv[2])))
    elif what == "free-port":
        print(free_port())
    elif what == "report":
        report(sys.argv[2])
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
