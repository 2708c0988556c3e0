#!/usr/bin/env python3
"""How long a stdio verdict takes: mcpulse against the MCP Inspector CLI and a minimal
single-process client, on the same real server, idle and under CPU load, in one run.

Usage: stdio_compare.py --mcpulse BIN --inspector BIN --runs N [--load K] [--label NAME]
                        -- SERVER COMMAND...

For each client, N runs in turn (interleaved: one run of each client per round, so that a
change of the machine's speed during the run falls on every client alike), wall time from the
spawn to the client's exit. The clients:
  mcpulse     `mcpulse probe -- SERVER` (the default: auto era, one process);
  inspector   `mcp-inspector --cli SERVER --method tools/list`;
  minimal     this script's own client (below): spawn, initialize, notifications/initialized,
              tools/list, end. One process, nothing else: the least any client can do;
  server      the server alone: spawn to its first reply to `initialize` (its start-up and
              handshake), measured by the minimal client.
With --load K, K busy loops run on the machine during the runs (a loaded 2-core machine, as in
issue #15's figures). Prints one JSON object with each client's median, min and max (ms): for mcpulse and the
Inspector both the time to their first stdout byte (the verdict, the result) and to their exit
(mcpulse prints its verdict before it ends the server: stdin closed, then SIGTERM, then SIGKILL).
"""
import argparse
import json
import os
import selectors
import statistics
import subprocess
import sys
import time

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "minimal", "version": "0"},
    },
}


def minimal(server):
    """The minimal single-process client. Returns (wall_ms, server_ready_ms)."""
    t0 = time.monotonic()
    p = subprocess.Popen(server, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, bufsize=0)
    sel = selectors.DefaultSelector()
    sel.register(p.stdout, selectors.EVENT_READ)
    buf = b""

    def reply(want):
        nonlocal buf
        while True:
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                try:
                    m = json.loads(line)
                except ValueError:
                    continue
                if m.get("id") == want:
                    return m
            if not sel.select(timeout=60):
                raise TimeoutError(f"no reply {want}")
            chunk = os.read(p.stdout.fileno(), 65536)
            if not chunk:
                raise EOFError("server closed stdout")
            buf += chunk

    p.stdin.write((json.dumps(INIT) + "\n").encode())
    reply(1)
    ready = (time.monotonic() - t0) * 1000
    p.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
    p.stdin.write(b'{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}\n')
    reply(2)
    p.stdin.close()
    p.kill()
    p.wait()
    return (time.monotonic() - t0) * 1000, ready


def timed(cmd):
    """(ms to the client's first stdout byte: its verdict or result, ms to its exit, exit code)."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL)
    first = p.stdout.read(1)
    verdict = (time.monotonic() - t0) * 1000
    p.stdout.read()
    code = p.wait()
    done = (time.monotonic() - t0) * 1000
    return (verdict if first else done), done, code


def stats(xs):
    return {"median_ms": round(statistics.median(xs), 1), "min_ms": round(min(xs), 1),
            "max_ms": round(max(xs), 1), "runs": len(xs)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mcpulse", required=True)
    ap.add_argument("--inspector", required=True)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--load", type=int, default=0)
    ap.add_argument("--label", default="")
    ap.add_argument("--inspector-env", action="append", default=[],
                    help="KEY=VALUE for the server the Inspector starts (it passes few variables on)")
    ap.add_argument("server", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    server = a.server[1:] if a.server[:1] == ["--"] else a.server
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
               for _ in range(a.load)]
    times = {"mcpulse_verdict": [], "mcpulse_exit": [], "inspector_result": [],
             "inspector_exit": [], "minimal": [], "server_alone": []}
    inspector = [a.inspector, "--cli"]
    for kv in a.inspector_env:
        inspector += ["-e", kv]
    inspector += [*server, "--method", "tools/list"]
    codes = {"mcpulse": set(), "inspector": set()}
    try:
        # One warm-up round (page cache, the interpreter's bytecode), not counted.
        timed([a.mcpulse, "probe", "--", *server])
        minimal(server)
        for _ in range(a.runs):
            verdict, done, code = timed([a.mcpulse, "probe", "--", *server])
            times["mcpulse_verdict"].append(verdict)
            times["mcpulse_exit"].append(done)
            codes["mcpulse"].add(code)
            verdict, done, code = timed(inspector)
            times["inspector_result"].append(verdict)
            times["inspector_exit"].append(done)
            codes["inspector"].add(code)
            wall, ready = minimal(server)
            times["minimal"].append(wall)
            times["server_alone"].append(ready)
    finally:
        for b in burners:
            b.kill()
            b.wait()
    out = {"label": a.label, "server": server, "load": a.load,
           "exit_codes": {k: sorted(v) for k, v in codes.items()}}
    out.update({k: stats(v) for k, v in times.items()})
    print(json.dumps(out))


if __name__ == "__main__":
    main()
