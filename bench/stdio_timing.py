#!/usr/bin/env python3
"""Times a client probing a stdio MCP server, run after run, from outside the client.

Usage: stdio_timing.py --runs N --out OUT.json [--transcript FILE] [--rss] -- CLIENT COMMAND...

Per run it records, on this process's clock from just before the spawn (mcpulse's own times,
from its transcript, are moved onto it with the transcript's `started_unix_us`):
  verdict_ms  when the client's first stdout byte arrived (its verdict / result),
  exit_ms     when the client process ended (waitpid returned),
and, with --transcript (the FILE the client command writes with mcpulse's --transcript):
  ready_ms        the server's readiness: spawn -> its first JSON-RPC frame on stdout; with two
                  processes started side by side (auto mode), the later of their first replies,
  done_ms         mcpulse's total_ms: the last protocol step finished,
  server_exit_ms  when the server process ended (processes[].exit.at_ms), and how.
mcpulse's clock starts a little after the spawn (exec, start-up, argument parsing); the shift
(`clock_shift_ms`, from wall-clock readings on both sides, to the microsecond) puts its times on
this clock, so verdict_ms - ready_ms is one clock's interval.

With --rss, a second thread polls /proc/PID/status for VmHWM (the client's own peak resident
set, without its children, i.e. without the server) every 0.2 ms and keeps the last value read
before the exit; these runs are separate, so the polling does not disturb the timings.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time


def hwm_kb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def one(cmd, transcript, rss):
    if transcript and os.path.exists(transcript):
        os.unlink(transcript)
    wall0 = time.time()
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    peak = [None]
    stop = threading.Event()
    if rss:
        def poll():
            while not stop.is_set():
                v = hwm_kb(p.pid)
                if v is None:
                    break
                peak[0] = v
                time.sleep(0.0002)
        th = threading.Thread(target=poll, daemon=True)
        th.start()
    first = p.stdout.read(1)
    verdict = time.monotonic() if first else None
    p.stdout.read()
    rc = p.wait()
    end = time.monotonic()
    stop.set()
    run = {
        "rc": rc,
        "verdict_ms": (verdict - t0) * 1000 if verdict else None,
        "exit_ms": (end - t0) * 1000,
    }
    if rss:
        th.join()
        run["rss_kb"] = peak[0]
    if transcript:
        tr = json.load(open(transcript))
        # mcpulse's clock starts after its exec and start-up (which come before it starts the
        # server); `started_unix_us` puts that start on this clock, so that readiness and the
        # verdict are compared on one clock. Without it (the Inspector), no shift.
        shift = 0.0
        if tr.get("started_unix_us"):
            shift = tr["started_unix_us"] / 1000.0 - wall0 * 1000.0
        run["clock_shift_ms"] = shift
        for e in tr["exchanges"]:
            e["at_ms"] += shift
            for f in e.get("frames", []):
                f["at_ms"] += shift
        tr["total_ms"] += shift
        for pr in tr.get("processes", []):
            if pr.get("exit"):
                pr["exit"]["at_ms"] += shift
        frames = [f["at_ms"] for e in tr["exchanges"] for f in e.get("frames", [])]
        # Readiness: each process started at once (auto mode starts two side by side) is ready
        # at its first reply; the verdict needs them all, so the server is ready when the last
        # of them is. Exchanges sent before any reply came are the ones sent at start-up.
        first = min(frames) if frames else None
        at_start = [
            e["frames"][0]["at_ms"] for e in tr["exchanges"]
            if first is not None and e["at_ms"] < first and e.get("frames")
        ]
        run["ready_ms"] = ready = max(at_start) if at_start else first
        run["first_reply_ms"] = first
        run["done_ms"] = done = tr["total_ms"]
        # Between readiness and done: the client's own time between one exchange's end and
        # the next one's start; the rest is spent waiting on the server.
        exs = sorted(tr["exchanges"], key=lambda e: e["at_ms"])
        gaps = 0.0
        for a, b in zip(exs, exs[1:]):
            end = a["at_ms"] + a["elapsed_ms"]
            if ready is not None and end >= ready - 0.001 and b["at_ms"] <= done:
                gaps += max(0.0, b["at_ms"] - end)
        run["client_gaps_ms"] = gaps
        run["exchanges"] = len(exs)
        procs = tr.get("processes", [])
        ex = procs[-1].get("exit") if procs else None
        run["server_exit_ms"] = ex.get("at_ms") if ex else None
        run["server_exit"] = (
            None if not ex else
            (f"signal {ex['signal']}" if ex.get("signal") else f"code {ex.get('code')}")
            + (" (by probe)" if ex.get("by_probe") else "")
        )
        run["spawns"] = len(procs)
    return run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--out", required=True)
    ap.add_argument("--transcript")
    ap.add_argument("--rss", action="store_true")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    for _ in range(a.warmup):
        one(cmd, a.transcript, False)
    runs = [one(cmd, a.transcript, a.rss) for _ in range(a.runs)]
    bad = [r for r in runs if r["rc"] != 0]
    json.dump({"command": cmd, "runs": runs}, open(a.out, "w"), indent=1)
    med = lambda k: statistics.median(r[k] for r in runs if r.get(k) is not None) if any(r.get(k) is not None for r in runs) else None
    print(json.dumps({k: med(k) for k in ("verdict_ms", "exit_ms", "ready_ms", "done_ms", "rss_kb")}), file=sys.stderr)
    if bad:
        print(f"stdio_timing: {len(bad)} of {len(runs)} runs exited non-zero ({bad[0]['rc']})", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
