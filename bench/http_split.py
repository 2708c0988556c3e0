#!/usr/bin/env python3
"""Splits the wall time of `mcpulse probe URL` into where it goes, run after run.

Usage: http_split.py --runs N --out OUT.json -- MCPULSE probe [FLAGS] URL

Each run adds `--transcript FILE` to the command and times the process from just before the
spawn to its exit (waitpid), on this process's clock. From the transcript it takes, per run:
  before_ms   spawn -> mcpulse's clock starts (exec, start-up, argument parsing; the shift from
              the transcript's `started_unix_us` against the wall clock read before the spawn),
  waiting_ms  the time with at least one request or connection attempt outstanding (the union
              of the exchanges' and connections' intervals, so concurrent requests count once):
              the server answering, and the loopback network,
  gaps_ms     the rest of the protocol steps: mcpulse's own work between one answer and the
              next request,
  after_ms    the last answer -> exit: judging, printing, writing the transcript, exit,
  wall_ms     the whole, as the sum of the four.
The timings come from the same runs, so the parts add up. Writing the transcript is part of
`after_ms` here (a run without --transcript does not pay it); the timed runs in the report
(hyperfine) are without it.
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time


def union_ms(tr):
    spans = []
    for e in tr.get("exchanges", []):
        if e.get("at_ms") is not None and e.get("elapsed_ms") is not None:
            spans.append((e["at_ms"], e["at_ms"] + e["elapsed_ms"]))
    for c in tr.get("connections", []):
        d = sum(c.get(k) or 0 for k in ("dns_ms", "connect_ms", "tls_ms"))
        if c.get("at_ms") is not None:
            spans.append((c["at_ms"], c["at_ms"] + d))
    total, end, last = 0.0, None, 0.0
    for a, b in sorted(spans):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
        last = max(last, b)
    return total, last


def one(cmd, path):
    if os.path.exists(path):
        os.unlink(path)
    wall0 = time.time()
    t0 = time.monotonic()
    subprocess.run(cmd + ["--transcript", path], stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = (time.monotonic() - t0) * 1000.0
    with open(path) as f:
        tr = json.load(f)
    before = tr["started_unix_us"] / 1000.0 - wall0 * 1000.0
    waiting, flow_end = union_ms(tr)
    return {
        "before_ms": before,
        "waiting_ms": waiting,
        "gaps_ms": flow_end - waiting,
        "after_ms": wall - before - flow_end,
        "wall_ms": wall,
        "requests": len(tr.get("exchanges", [])),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--out", required=True)
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "transcript.json")
        for _ in range(a.warmup):
            one(cmd, path)
        runs = [one(cmd, path) for _ in range(a.runs)]
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    with open(a.out, "w") as f:
        json.dump({"runs": runs, "median": med}, f, indent=1)
    print(json.dumps({k: round(v, 3) for k, v in med.items()}))


if __name__ == "__main__":
    main()
