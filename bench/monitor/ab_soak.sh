#!/usr/bin/env bash
# A/B of the monitor's 10,000-target soak: two mcpulse binaries, the same demo servers, run
# alternately (A B B A ...) on the same machine in one session, so a machine's speed cancels out.
# The figure compared is the one docs/benchmarks-monitor.md reports: the monitor's mean CPU
# share of one core over the steady window (from interval + 10 s to the end), and its checks/s.
#
#   bench/monitor/ab_soak.sh OLD_BINARY NEW_BINARY [ROUNDS]
#
# Needs the demo fleet built (cargo build --release -p mcpulse-demo --example bench_fleet).
# Not a test; prints a TSV and a summary. Everything on 127.0.0.1, ports chosen at run time.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
here="$root/bench/monitor"
A="$1" B="$2" ROUNDS="${3:-2}"
TARGETS=${BENCH_TARGETS:-10000} INTERVAL=${BENCH_INTERVAL:-60} SOAK=${BENCH_SOAK:-160}
FLEET="$root/target/release/examples/bench_fleet"
HZ=$(getconf CLK_TCK)
work="$(mktemp -d "${TMPDIR:-/tmp}/mcpulse-ab.XXXXXX")"
pids=()
cleanup() { exec 3>&- 2>/dev/null || true; for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
mkfifo "$work/fleet.in"
taskset -c 1 "$FLEET" <"$work/fleet.in" >"$work/fleet.txt" 2>"$work/fleet.err" &
FLEET_PID=$!; pids+=("$FLEET_PID"); exec 3>"$work/fleet.in"
for _ in $(seq 100); do grep -q '^ready$' "$work/fleet.txt" && break; sleep 0.1; done
url_of() { awk -v n="$1" '$1 == n { print $2 }' "$work/fleet.txt"; }
order=()
for ((r = 0; r < ROUNDS; r++)); do if ((r % 2)); then order+=(B A); else order+=(A B); fi; done
printf 'run\tbinary\tcpu_steady_pct\tchecks_per_s\tcpu_busy_other\n'
i=0
for which in "${order[@]}"; do
  bin=$A; [[ $which == B ]] && bin=$B
  port=$(free_port); db="$work/soak-$i.db"
  python3 - "$work/soak.toml" "$TARGETS" "$INTERVAL" "$port" "$db" "$(url_of healthy-modern)" "$(url_of healthy-legacy)" "$(url_of legacy-sse)" <<'PY'
import sys
out, n, interval, port, db, *urls = sys.argv[1:]
lines = ["[server]", f'listen = "127.0.0.1:{port}"', "", "[storage]", f'path = "{db}"', "", "[defaults]", f'interval = "{interval}s"', ""]
modern, legacy, sse = urls
for i in range(int(n)):
    u = modern if i % 20 < 10 else legacy if i % 20 < 19 else sse
    lines += ["[[targets]]", f'name = "t{i:05d}"', f'url = "{u}?n={i}"', ""]
open(out, "w").write("\n".join(lines))
PY
  s0=$(head -n1 /proc/stat)
  "$bin" monitor --config "$work/soak.toml" >"$work/soak-$i.log" 2>&1 &
  pid=$!; pids+=("$pid")
  python3 "$here/sample.py" "$pid" "$FLEET_PID" "$SOAK" "$work/soak-$i.tsv"
  s1=$(head -n1 /proc/stat)
  kill "$pid"; wait "$pid" 2>/dev/null || true
  python3 - "$work/soak-$i.tsv" "$db" "$INTERVAL" "$HZ" "$which" "$i" "$s0" "$s1" <<'PY'
import sqlite3, sys
tsv, db, interval, hz, which, i, s0, s1 = sys.argv[1:]
rows = [[float(v) for v in l.split("\t")] for l in open(tsv) if l.strip()]
st = [r for r in rows if r[0] >= int(interval) + 10]
cpu = (st[-1][3] - st[0][3]) / int(hz) / (st[-1][0] - st[0][0]) * 100
c = sqlite3.connect(db)
cols = [r[1] for r in c.execute("PRAGMA table_info(checks)")]
tcol = "at_ms" if "at_ms" in cols else cols[2]
t = [r[0] for r in c.execute(f"SELECT {tcol} FROM checks ORDER BY {tcol}")]
lo = t[0] + (int(interval) + 10) * 1000 if t else 0
n = sum(1 for x in t if x >= lo); span = (t[-1] - lo) / 1000 if t and t[-1] > lo else 1
a = [int(x) for x in s0.split()[1:9]]; b = [int(x) for x in s1.split()[1:9]]
d = [y - x for x, y in zip(a, b)]; busy = 100 * (sum(d) - d[3] - d[4]) / sum(d)
print(f"{i}\t{which}\t{cpu:.1f}\t{n/span:.0f}\t{busy:.0f}")
PY
  i=$((i + 1))
done
