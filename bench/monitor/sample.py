#!/usr/bin/env python3
"""Samples a process once a second: resident memory (VmRSS), its peak (VmHWM) and CPU time
(utime + stime from /proc/PID/stat), and another process's CPU time beside it.

    sample.py PID OTHER_PID SECONDS OUT.tsv

Writes one line per sample: seconds since start, VmRSS kB, VmHWM kB, ticks, other's ticks.
Stops early when PID exits."""
import sys
import time

pid, other, seconds, out = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]


def status(p):
    vals = {}
    with open(f"/proc/{p}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                vals[k] = int(v.split()[0])
    return vals


def ticks(p):
    with open(f"/proc/{p}/stat") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return int(rest[11]) + int(rest[12])


t0 = time.monotonic()
with open(out, "w") as f:
    i = 0
    while True:
        now = time.monotonic() - t0
        try:
            s = status(pid)
            line = f"{now:.3f}\t{s['VmRSS']}\t{s['VmHWM']}\t{ticks(pid)}\t{ticks(other)}\n"
        except (OSError, KeyError, IndexError):
            break
        f.write(line)
        f.flush()
        i += 1
        if i > seconds:
            break
        time.sleep(max(0.0, t0 + i - time.monotonic()))
