#!/usr/bin/env bash
# The monitor benchmark, in one command: /probe throughput beside the server's raw capacity and
# Prometheus' blackbox_exporter (against the demo's Rust server, and against a server on the
# official Python SDK), the resident memory and CPU of a monitor holding 10,000 targets, and the
# history store's write rate. Writes docs/benchmarks-monitor.md.
#
#   bench/monitor/run.sh               # the full run (about 10 minutes on 2 cores)
#   BENCH_QUICK=1 bench/monitor/run.sh # shorter runs, for trying the script out (still writes the doc)
#
# Not a test: nothing here fails on a missed target; the doc says which are met. Every figure in
# the doc comes from this run. Needs root for apt-get (wrk, prometheus-blackbox-exporter), cargo,
# python3, curl, taskset. Everything listens on 127.0.0.1 only, on ports chosen at run time, and
# every process started here is stopped by its PID on exit.
#
# CPU layout (2 cores): the MCP server is pinned to core SERVER_CPU (1), alone; the load
# generator (wrk) and the prober under test (mcpulse monitor, or blackbox_exporter) share core
# CLIENT_CPU (0). The server's capacity is measured with the same layout (wrk on core 0), so the
# ceiling and the probes see the same server. For the 10,000-target soak the monitor is not
# pinned (it gets what it needs; its own CPU time is what is measured) and the servers stay on
# core 1.
set -euo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
here="$root/bench/monitor"

if [[ -n "${BENCH_QUICK:-}" ]]; then
  DUR=${BENCH_DURATION:-4} ROUNDS=${BENCH_ROUNDS:-1} SOAK=${BENCH_SOAK:-90} STORE_RECORDS=${BENCH_STORE_RECORDS:-100000}
else
  DUR=${BENCH_DURATION:-10} ROUNDS=${BENCH_ROUNDS:-3} SOAK=${BENCH_SOAK:-200} STORE_RECORDS=${BENCH_STORE_RECORDS:-500000}
fi
TARGETS=${BENCH_TARGETS:-10000}
INTERVAL=${BENCH_INTERVAL:-60}
CONC=${BENCH_CONCURRENCY:-64}
SERVER_CPU=${BENCH_SERVER_CPU:-1}
CLIENT_CPU=${BENCH_CLIENT_CPU:-0}
WARM=2 # seconds of warm-up before each measured wrk run
BLACKBOX_VERSION=0.23.0-4+b4

log() { printf '\033[1mbench:\033[0m %s\n' "$*" >&2; }

# --- prerequisites ----------------------------------------------------------------------------
log "building mcpulse, the demo servers and the store benchmark (release)"
cargo build --release -p mcpulse >&2
cargo build --release -p mcpulse-demo --example bench_fleet >&2
cargo build --release -p mcpulse-monitor --example store_bench >&2
MCPULSE="$root/target/release/mcpulse"
FLEET="$root/target/release/examples/bench_fleet"
STORE_BENCH="$root/target/release/examples/store_bench"

apt_updated=""
apt_install() { # PACKAGE[=VERSION]...: without starting any service (policy-rc.d exits 101)
  local policy=/usr/sbin/policy-rc.d backup=""
  if [[ -z "$apt_updated" ]]; then apt-get update -qq >&2 || true; apt_updated=1; fi
  if [[ -e $policy ]]; then backup="$(mktemp)"; cp -p "$policy" "$backup"; fi
  printf '#!/bin/sh\nexit 101\n' >"$policy"
  chmod 755 "$policy"
  local rc=0
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >&2 || rc=$?
  if [[ -n "$backup" ]]; then cp -p "$backup" "$policy"; rm -f "$backup"; else rm -f "$policy"; fi
  return $rc
}
if [[ "$(dpkg-query -W -f '${Version}' prometheus-blackbox-exporter 2>/dev/null || true)" != "$BLACKBOX_VERSION" ]]; then
  log "installing prometheus-blackbox-exporter $BLACKBOX_VERSION (apt, service not started)"
  apt_install "prometheus-blackbox-exporter=$BLACKBOX_VERSION"
fi
command -v wrk >/dev/null || { log "installing wrk (apt)"; apt_install wrk; }
command -v taskset >/dev/null || { log "installing util-linux (taskset)"; apt_install util-linux; }
BLACKBOX=/usr/bin/prometheus-blackbox-exporter

work="$(mktemp -d "${TMPDIR:-/tmp}/mcpulse-monitor-bench.XXXXXX")"
pids=()
cleanup() {
  local p
  exec 3>&- 2>/dev/null || true
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  if [[ -z "${BENCH_KEEP:-}" ]]; then rm -rf "$work"; else log "kept $work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_http() { # URL: until it answers (any status), 20 s at most
  local i
  for i in $(seq 200); do
    [[ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 0.5 "$1" || true)" != 000 ]] && return 0
    sleep 0.1
  done
  log "$1 did not come up"; return 1
}
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; } # user+system CPU of a process, clock ticks
sticks() { awk '{print $15}' "/proc/$1/stat"; }      # its system (kernel) CPU alone
HZ=$(getconf CLK_TCK)

# The machine may be shared: before each measured block, wait (at most BENCH_QUIET_WAIT s) until
# other work leaves the CPUs nearly idle, and record how busy they were.
MAX_BUSY=${BENCH_MAX_BUSY:-15}
QUIET_WAIT=${BENCH_QUIET_WAIT:-120}
cpu_busy() { # percent of all CPUs busy over the next 2 s
  local a b
  a=$(head -n 1 /proc/stat); sleep 2; b=$(head -n 1 /proc/stat)
  awk -v a="$a" -v b="$b" 'BEGIN { split(a, x); split(b, y); busy = 0; total = 0
    for (i = 2; i <= 9; i++) { d = y[i] - x[i]; total += d; if (i != 5 && i != 6) busy += d }
    printf "%.0f\n", total ? 100 * busy / total : 0 }'
}
wait_quiet() { # BLOCK
  local waited=0 busy
  while :; do
    busy=$(cpu_busy)
    ((busy < MAX_BUSY)) && break
    if ((waited >= QUIET_WAIT)); then
      log "$1: the CPUs are still ${busy}% busy with other work after ${waited}s: measuring anyway"
      break
    fi
    ((waited == 0)) && log "$1: waiting for other work to finish (CPUs ${busy}% busy)"
    sleep 3
    waited=$((waited + 5))
  done
  printf '%s\t%s\t%s\n' "$1" "$busy" "$waited" >>"$work/quiet.tsv"
}

LOAD_START="$(cut -d' ' -f1-3 /proc/loadavg)"

# --- the MCP servers --------------------------------------------------------------------------
# The demo fleet on one thread, pinned to SERVER_CPU; it lives while fd 3 (its stdin) is open.
log "starting the demo servers on core $SERVER_CPU"
mkfifo "$work/fleet.in"
taskset -c "$SERVER_CPU" "$FLEET" <"$work/fleet.in" >"$work/fleet.txt" 2>"$work/fleet.err" &
FLEET_PID=$!
pids+=("$FLEET_PID")
exec 3>"$work/fleet.in"
for _ in $(seq 100); do grep -q '^ready$' "$work/fleet.txt" && break; sleep 0.1; done
grep -q '^ready$' "$work/fleet.txt" || { log "the demo servers did not start"; cat "$work/fleet.err" >&2; exit 1; }
url_of() { awk -v n="$1" '$1 == n { print $2 }' "$work/fleet.txt"; }
URL_MODERN=$(url_of healthy-modern)
URL_LEGACY=$(url_of healthy-legacy)
URL_SSE=$(url_of legacy-sse)
BASE_MODERN=${URL_MODERN%/mcp}

# A third-party server beside it: the official Python SDK 2.x (`MCPServer`, bench/modern_server.py,
# installed by scripts/interop-setup.sh), on the same core. Idle while the demo server is measured.
log "installing the Python SDK for the third-party server (scripts/interop-setup.sh)"
interop="$(bash scripts/interop-setup.sh)"
PYTHON="$(python3 -c 'import sys; print(sys.executable)')" # the interpreter, not a pyenv shim
P_PY=$(free_port)
PYTHONPATH="$interop/py2" taskset -c "$SERVER_CPU" "$PYTHON" bench/modern_server.py http "$P_PY" >"$work/py.log" 2>&1 &
PY_PID=$!
pids+=("$PY_PID")
URL_PY="http://127.0.0.1:$P_PY/mcp"
BASE_PY="http://127.0.0.1:$P_PY"
wait_http "$URL_PY"
PY_VERSION="python mcp $(PYTHONPATH="$interop/py2" "$PYTHON" -c 'import importlib.metadata as m; print(m.version("mcp"))') on $("$PYTHON" --version 2>&1)"

# --- what one probe sends ---------------------------------------------------------------------
# The throughput figure uses a target with era = "modern" and security = false: the health
# probe (server/discover, tools/list, and the other lists the server advertises). The defaults
# (era auto, security checks on) are measured too, as a second figure.
"$MCPULSE" probe --era modern --no-security --transcript "$work/tr-min.json" "$URL_MODERN" >"$work/probe-min.txt"
"$MCPULSE" probe --transcript "$work/tr-default.json" "$URL_MODERN" >"$work/probe-default.txt"
python3 "$here/wrk_requests.py" "$work/tr-min.json" "$work/mix.lua" >"$work/mix-steps.txt"
python3 "$here/wrk_requests.py" "$work/tr-min.json" "$work/mix-close.lua" --close >/dev/null
python3 "$here/wrk_requests.py" "$work/tr-min.json" "$work/tools.lua" --step tools/list >/dev/null
# (a degraded verdict exits 1; whether /probe succeeds is checked below, before anything is timed)
"$MCPULSE" probe --era modern --no-security --transcript "$work/tr-py.json" "$URL_PY" >"$work/probe-py.txt" ||
  log "the Python server's probe exited $? ($(head -n 1 "$work/probe-py.txt"))"
python3 "$here/wrk_requests.py" "$work/tr-py.json" "$work/py-mix.lua" >"$work/py-mix-steps.txt"

# --- the probers ------------------------------------------------------------------------------
MON_PORT=$(free_port)
cat >"$work/monitor.toml" <<EOF
# The /probe throughput run: two names for the same server. The interval is long so that the
# scheduler stays out of the way (each target is checked once, at its phase within the hour).
[server]
listen = "127.0.0.1:$MON_PORT"

[storage]
path = "$work/throughput.db"

[defaults]
interval = "1h"

[[targets]]
name = "modern"
url = "$URL_MODERN"
era = "modern"
security = false

[[targets]]
name = "modern-default"
url = "$URL_MODERN"

[[targets]]
name = "python"
url = "$URL_PY"
era = "modern"
security = false
EOF
"$MCPULSE" check-config "$work/monitor.toml" >&2
taskset -c "$CLIENT_CPU" "$MCPULSE" monitor --config "$work/monitor.toml" >"$work/monitor.log" 2>&1 &
MON_PID=$!
pids+=("$MON_PID")
MON="http://127.0.0.1:$MON_PORT"
wait_http "$MON/livez"

BB_PORT=$(free_port)
# One HTTP POST per probe: the same tools/list request mcpulse sends (body and headers from its
# transcript), a 200 and a JSON-RPC result required.
python3 - "$work/tr-min.json" "$work/blackbox.yml" <<'EOF'
import json, sys
tr = json.load(open(sys.argv[1]))
ex = next(e for e in tr["exchanges"] if e["step"] == "tools/list")
headers = {k: v for k, v in ex["request"]["headers"]}
lines = ["modules:", "  http_post_mcp:", "    prober: http", "    timeout: 10s", "    http:",
         "      method: POST", "      headers:"]
lines += [f"        {k}: {json.dumps(v)}" for k, v in headers.items()]
lines += [f"      body: {json.dumps(ex['request']['body'])}",
          "      valid_status_codes: [200]",
          "      fail_if_body_not_matches_regexp: ['\"result\"']",
          "      preferred_ip_protocol: ip4",
          "      ip_protocol_fallback: false"]
open(sys.argv[2], "w").write("\n".join(lines) + "\n")
EOF
taskset -c "$CLIENT_CPU" "$BLACKBOX" --config.file="$work/blackbox.yml" --web.listen-address="127.0.0.1:$BB_PORT" >"$work/blackbox.log" 2>&1 &
BB_PID=$!
pids+=("$BB_PID")
BB="http://127.0.0.1:$BB_PORT"
wait_http "$BB/metrics"

# Each must answer probe_success 1 before it is timed.
enc() { python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$1"; }
URL_P_MIN="$MON/probe?target=modern"
URL_P_DEF="$MON/probe?target=modern-default"
URL_P_BB="$BB/probe?module=http_post_mcp&target=$(enc "$URL_MODERN")"
URL_P_PY="$MON/probe?target=python"
URL_P_PY_BB="$BB/probe?module=http_post_mcp&target=$(enc "$URL_PY")"
for u in "$URL_P_MIN" "$URL_P_DEF" "$URL_P_BB" "$URL_P_PY" "$URL_P_PY_BB"; do
  curl -s "$u" >"$work/sample-probe.txt"
  grep -q '^probe_success 1$' "$work/sample-probe.txt" || { log "$u did not succeed:"; cat "$work/sample-probe.txt" >&2; exit 1; }
done
curl -s "$URL_P_MIN" >"$work/sample-mcpulse.txt"
curl -s "$URL_P_BB" >"$work/sample-blackbox.txt"
curl -s "$URL_P_BB&debug=true" >"$work/sample-blackbox-debug.txt" || true

# --- throughput -------------------------------------------------------------------------------
: >"$work/runs.tsv" # round, id, requests/s, failures, socket errors, prober ticks, server ticks, seconds, p50 us, p99 us, requests, prober system ticks

# run ROUND ID PROBER_PID URL [LUA]: wrk on CLIENT_CPU at concurrency CONC for DUR seconds; the
# server's CPU is read from SRV_PID (default: the demo fleet).
run() {
  local round=$1 id=$2 ppid=$3 url=$4 lua=${5:-$here/probe_check.lua}
  taskset -c "$CLIENT_CPU" wrk -t1 -c"$CONC" -d"${WARM}s" -s "$lua" "$url" >/dev/null 2>&1 || true
  local pa sa pb sb ka kb out
  pa=$( [[ -n $ppid ]] && ticks "$ppid" || echo 0 ); sa=$(ticks "${SRV_PID:-$FLEET_PID}")
  ka=$( [[ -n $ppid ]] && sticks "$ppid" || echo 0 )
  out="$work/wrk-$round-$id.txt"
  taskset -c "$CLIENT_CPU" wrk -t1 -c"$CONC" -d"${DUR}s" --latency -s "$lua" "$url" >"$out" 2>&1
  pb=$( [[ -n $ppid ]] && ticks "$ppid" || echo 0 ); sb=$(ticks "${SRV_PID:-$FLEET_PID}")
  kb=$( [[ -n $ppid ]] && sticks "$ppid" || echo 0 )
  python3 - "$out" "$round" "$id" "$((pb - pa))" "$((sb - sa))" "$((kb - ka))" >>"$work/runs.tsv" <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
def grab(pat, default="0"):
    m = re.search(pat, text, re.M)
    return m.group(1) if m else default
reqs = grab(r"^\s*(\d+) requests in")
secs = grab(r"requests in ([\d.]+)s")
rate = grab(r"^Requests/sec:\s*([\d.]+)")
fail = grab(r"^(?:probe_)?failures (\d+)")
sock = grab(r"^socket_errors (\d+)")
def us(v, unit):
    return float(v) * {"us": 1, "ms": 1000, "s": 1e6}[unit]
lat = dict(re.findall(r"^\s+(50|99)%\s+([\d.]+(?:us|ms|s))", text, re.M))
def lat_us(k):
    m = re.match(r"([\d.]+)(us|ms|s)", lat.get(k, "0us"))
    return f"{us(m.group(1), m.group(2)):.0f}"
print("\t".join([sys.argv[2], sys.argv[3], rate, fail, sock,
                 sys.argv[4], sys.argv[5], secs, lat_us("50"), lat_us("99"), reqs, sys.argv[6]]))
EOF
  log "  $id: $(awk -F'\t' -v r="$round" -v i="$id" '$1 == r && $2 == i { printf "%s/s (failures %s)", $3, $4 }' "$work/runs.tsv")"
}

for round in $(seq "$ROUNDS"); do
  wait_quiet "throughput-$round"
  log "throughput, round $round of $ROUNDS (wrk on core $CLIENT_CPU, concurrency $CONC, ${DUR}s each)"
  run "$round" capacity-mix "" "$BASE_MODERN" "$work/mix.lua"
  run "$round" mcpulse "$MON_PID" "$URL_P_MIN"
  run "$round" blackbox "$BB_PID" "$URL_P_BB"
  run "$round" capacity-tools "" "$BASE_MODERN" "$work/tools.lua"
  run "$round" capacity-conn "" "$BASE_MODERN" "$work/mix-close.lua"
  run "$round" mcpulse-default "$MON_PID" "$URL_P_DEF"
  SRV_PID=$PY_PID run "$round" py-capacity "" "$BASE_PY" "$work/py-mix.lua"
  SRV_PID=$PY_PID run "$round" py-mcpulse "$MON_PID" "$URL_P_PY"
  SRV_PID=$PY_PID run "$round" py-blackbox "$BB_PID" "$URL_P_PY_BB"
done
kill "$PY_PID" 2>/dev/null || true
curl -s "$MON/metrics" >"$work/monitor-metrics.txt"
kill "$MON_PID" "$BB_PID" 2>/dev/null || true
wait "$MON_PID" 2>/dev/null || true
wait "$BB_PID" 2>/dev/null || true

# --- 10,000 targets: memory and CPU -----------------------------------------------------------
SOAK_PORT=$(free_port)
python3 - "$work/soak.toml" "$TARGETS" "$INTERVAL" "$SOAK_PORT" "$work/soak.db" "$URL_MODERN" "$URL_LEGACY" "$URL_SSE" <<'EOF'
import sys
out, n, interval, port, db, *urls = sys.argv[1:]
n = int(n)
lines = [
    "# The soak: targets spread over three demo servers (modern dual-era, legacy Streamable HTTP,",
    "# legacy HTTP+SSE), every one with the default settings (era auto, security checks on).",
    "[server]", f'listen = "127.0.0.1:{port}"', "",
    "[storage]", f'path = "{db}"', "",
    "[defaults]", f'interval = "{interval}s"', "",
]
# Of every 20 targets: 10 on the modern server, 9 on the legacy Streamable HTTP one, 1 on the
# legacy HTTP+SSE one. The demo SSE server holds at most 256 open streams and notices a closed
# one only at its next keep-alive (15 s), so more than about 17 SSE probes a second would be
# refused by it (503 "too many open streams"); 1 in 20 is about 8 a second.
modern, legacy, sse = urls
for i in range(n):
    u = modern if i % 20 < 10 else legacy if i % 20 < 19 else sse
    lines += ["[[targets]]", f'name = "t{i:05d}"', f'url = "{u}?n={i}"', ""]
open(out, "w").write("\n".join(lines))
EOF
"$MCPULSE" check-config "$work/soak.toml" >&2
wait_quiet "soak"
log "soak: $TARGETS targets every ${INTERVAL}s for ${SOAK}s (RSS and CPU sampled every second)"
"$MCPULSE" monitor --config "$work/soak.toml" >"$work/soak.log" 2>&1 &
SOAK_PID=$!
pids+=("$SOAK_PID")
SOAK_T0=$(date +%s.%N)
python3 "$here/sample.py" "$SOAK_PID" "$FLEET_PID" "$SOAK" "$work/soak.tsv"
curl -s "http://127.0.0.1:$SOAK_PORT/api/v1/fleet" >"$work/soak-fleet.json" || true
curl -s "http://127.0.0.1:$SOAK_PORT/readyz" >"$work/soak-readyz.json" || true
kill "$SOAK_PID"
wait "$SOAK_PID" 2>/dev/null || true
python3 - "$work/soak.db" "$work/soak-db.json" "$SOAK_T0" <<'EOF'
import json, sqlite3, sys
db, out, t0 = sys.argv[1], sys.argv[2], float(sys.argv[3])
c = sqlite3.connect(db)
rows = c.execute("SELECT at_ms, status, duration_ms FROM checks").fetchall()
by_status = {}
per_second = {}
for at, status, _ in rows:
    by_status[status] = by_status.get(status, 0) + 1
    s = int(at / 1000 - t0)
    per_second[s] = per_second.get(s, 0) + 1
targets_checked = c.execute("SELECT count(DISTINCT target_id) FROM checks").fetchone()[0]
durations = sorted(d for _, st, d in rows if st != "down")
def pct(p):
    return durations[min(len(durations) - 1, int(p / 100 * len(durations)))] if durations else None
json.dump({"checks": len(rows), "by_status": by_status, "targets_checked": targets_checked,
           "per_second": per_second, "p50_ms": pct(50), "p99_ms": pct(99)}, open(out, "w"))
EOF

# --- the history store ------------------------------------------------------------------------
wait_quiet "store"
log "store: $STORE_RECORDS results into SQLite (store_bench)"
"$STORE_BENCH" --records "$STORE_RECORDS" --dir "$work/store" >"$work/store.txt" 2>&1 || log "store_bench failed (see the doc)"

# --- report -----------------------------------------------------------------------------------
cat >"$work/meta.json" <<EOF
{
  "date": "$(date -u +%Y-%m-%dT%H:%MZ)",
  "nproc": "$(nproc)",
  "cpu": "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')",
  "mem": "$(free -h | awk '/^Mem:/ {print $2}')",
  "kernel": "$(uname -sr)",
  "load_start": "$LOAD_START",
  "load_end": "$(cut -d' ' -f1-3 /proc/loadavg)",
  "mcpulse": "$("$MCPULSE" --version) (git $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD -- crates Cargo.toml Cargo.lock 2>/dev/null || echo ', with uncommitted changes'))",
  "rustc": "$(rustc --version)",
  "wrk": "$(wrk -v 2>&1 | head -n 1 | cut -d' ' -f1-2)",
  "blackbox": "$("$BLACKBOX" --version 2>&1 | head -n 1)",
  "blackbox_deb": "$(dpkg-query -W -f '${Version}' prometheus-blackbox-exporter)",
  "py_server": "$PY_VERSION",
  "duration": "$DUR", "warmup": "$WARM", "rounds": "$ROUNDS", "concurrency": "$CONC",
  "targets": "$TARGETS", "interval": "$INTERVAL", "soak": "$SOAK", "store_records": "$STORE_RECORDS",
  "server_cpu": "$SERVER_CPU", "client_cpu": "$CLIENT_CPU", "hz": "$HZ",
  "max_busy": "$MAX_BUSY", "quiet_wait": "$QUIET_WAIT",
  "quick": "${BENCH_QUICK:-}"
}
EOF
python3 "$here/report.py" "$work" "$root/docs/benchmarks-monitor.md"
log "wrote docs/benchmarks-monitor.md"
