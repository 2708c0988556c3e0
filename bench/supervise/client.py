#!/usr/bin/env python3
"""The benchmark client of bench/supervise/run.sh: spawns a stdio MCP server command (the server
itself, or a relay in front of it), does the legacy handshake, then measures, sequentially (one
request in flight at a time, as a client waiting on a tool does):

  latency     N requests of METHOD (`ping`, or `echo` = a small tools/call echo): per-request
              time from the write of the request to the read of its reply; p50, p99, mean (µs);
  throughput  M tools/call echo requests carrying SIZE bytes of text each (the reply carries
              them back): payload bytes moved both ways per second (MiB/s).

Usage: client.py latency N METHOD -- COMMAND...
       client.py throughput M SIZE -- COMMAND...
       client.py report RESULTS.jsonl        (renders the Markdown tables run.sh writes)
Prints one JSON object. Replies are matched by id; other lines (notifications, a relay's own
traffic) are skipped. The server is stopped by closing its stdin, then SIGTERM, then SIGKILL.
"""
import io
import json
import statistics
import subprocess
import sys
import time


def start(command):
    p = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, bufsize=0)
    return p


class Session:
    def __init__(self, command):
        self.p = start(command)
        # Unbuffered writes (each request goes out at once), buffered reads (a readline is
        # not a system call per byte).
        self.out = io.BufferedReader(self.p.stdout, 1 << 20)
        self.next_id = 0
        self.call("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                 "clientInfo": {"name": "bench", "version": "1"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, msg):
        self.p.stdin.write(json.dumps(msg, separators=(",", ":")).encode() + b"\n")

    def call(self, method, params):
        self.next_id += 1
        rid = self.next_id
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        while True:
            line = self.out.readline()
            if not line:
                raise SystemExit(f"the server closed its stdout (waiting for {method} #{rid})")
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if msg.get("id") == rid and ("result" in msg or "error" in msg):
                if "error" in msg:
                    raise SystemExit(f"{method} #{rid}: {msg['error']}")
                return msg["result"]

    def close(self):
        self.p.stdin.close()
        try:
            self.p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.p.terminate()
            try:
                self.p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()


def latency(n, method, command):
    s = Session(command)
    if method == "echo":
        request = ("tools/call", {"name": "echo", "arguments": {"text": "hi", "message": "hi"}})
    else:
        request = (method, {})
    for _ in range(min(200, n)):  # warm-up (JIT, caches), not counted
        s.call(*request)
    times = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        s.call(*request)
        times.append((time.perf_counter_ns() - t0) / 1000)
    s.close()
    times.sort()
    return {"kind": "latency", "method": method, "n": n,
            "p50_us": round(times[len(times) // 2], 1),
            "p99_us": round(times[min(len(times) - 1, int(len(times) * 0.99))], 1),
            "mean_us": round(statistics.fmean(times), 1)}


def throughput(m, size, command):
    s = Session(command)
    text = "x" * size
    s.call("tools/call", {"name": "echo", "arguments": {"text": text}})  # warm-up
    t0 = time.perf_counter()
    for _ in range(m):
        r = s.call("tools/call", {"name": "echo", "arguments": {"text": text}})
        if r["content"][0]["text"] != text:
            raise SystemExit("the echo came back different")
    elapsed = time.perf_counter() - t0
    s.close()
    return {"kind": "throughput", "n": m, "size": size,
            "mib_per_s": round(2 * m * size / elapsed / (1 << 20), 1),
            "ms_per_call": round(elapsed * 1000 / m, 3)}


def report(path):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    modes = []
    for r in rows:
        if r["mode"] not in modes:
            modes.append(r["mode"])

    def med(xs):
        return statistics.median(xs) if xs else float("nan")

    def by_mode(sel):
        """The rows of each path, in the order the paths were run."""
        for mode in modes:
            ms = [r for r in sel if r["mode"] == mode]
            if ms:
                yield mode, ms

    lines = []
    for server in dict.fromkeys(r["server"] for r in rows if r["kind"] == "latency"):
        for method in dict.fromkeys(r["method"] for r in rows if r["kind"] == "latency" and r["server"] == server):
            sel = [r for r in rows if r["kind"] == "latency" and r["server"] == server and r["method"] == method]
            base = med([r["p50_us"] for r in sel if r["mode"] == "direct"])
            base99 = med([r["p99_us"] for r in sel if r["mode"] == "direct"])
            lines.append(f"\n**Latency: `{method}` to {server}** ({sel[0]['n']:,} sequential requests a run; medians over {len([r for r in sel if r['mode'] == 'direct'])} runs)\n")
            lines.append("| path | p50 (µs) | added at p50 | p99 (µs) | added at p99 |")
            lines.append("|---|---|---|---|---|")
            for mode, ms in by_mode(sel):
                p50, p99 = med([r["p50_us"] for r in ms]), med([r["p99_us"] for r in ms])
                add = "" if mode == "direct" else f"{p50 - base:+.0f} µs"
                add99 = "" if mode == "direct" else f"{p99 - base99:+.0f} µs"
                lines.append(f"| {mode} | {p50:.0f} | {add} | {p99:.0f} | {add99} |")
    for server in dict.fromkeys(r["server"] for r in rows if r["kind"] == "throughput"):
        sel = [r for r in rows if r["kind"] == "throughput" and r["server"] == server]
        base = med([r["mib_per_s"] for r in sel if r["mode"] == "direct"])
        lines.append(f"\n**Throughput: {sel[0]['n']} echoes of {sel[0]['size'] // 1024:,} KiB to {server}** (payload both ways; medians)\n")
        lines.append("| path | MiB/s | of direct | ms a call |")
        lines.append("|---|---|---|---|")
        for mode, ms in by_mode(sel):
            v = med([r["mib_per_s"] for r in ms])
            lines.append(f"| {mode} | {v:.0f} | {100 * v / base:.0f}% | {med([r['ms_per_call'] for r in ms]):.2f} |")
    print("\n".join(lines))


def main():
    what = sys.argv[1]
    if what == "report":
        report(sys.argv[2])
        return
    sep = sys.argv.index("--")
    command = sys.argv[sep + 1:]
    if what == "latency":
        r = latency(int(sys.argv[2]), sys.argv[3], command)
    else:
        r = throughput(int(sys.argv[2]), int(sys.argv[3]), command)
    print(json.dumps(r))


if __name__ == "__main__":
    main()
