#!/usr/bin/env bash
# The probe benchmark: whole-process wall time and peak memory of `mcpulse probe` against local
# MCP servers, beside the MCP Inspector CLI and curl sending the same requests, in one run.
#
#   bench/probe.sh                 # the full run (about 15 minutes on 2 idle cores); writes docs/benchmarks.md
#   BENCH_QUICK=1 bench/probe.sh   # fewer runs, for trying the script out (still writes the doc)
#
# Knobs (environment): BENCH_RUNS, BENCH_WARMUP, BENCH_SLOW_RUNS (Inspector and stdio),
# BENCH_RSS_RUNS, BENCH_STDIO_RUNS; BENCH_MAX_BUSY (percent, default 15) and BENCH_QUIET_WAIT
# (seconds, default 300): before each timed block, wait that long at most for other work to leave
# the CPUs idle; BENCH_KEEP=1 keeps the scratch folder (transcripts, curl scripts, raw figures).
#
# Not a test: nothing here fails on a missed target; docs/benchmarks.md says which are met.
# Needs: cargo, node (20+), python3, curl, GNU time (/usr/bin/time), and root for
# `apt-get install hyperfine` if hyperfine is missing. Servers listen on 127.0.0.1 only
# (server-everything binds all interfaces; only loopback traffic is sent to it), on ports chosen
# at run time, and are stopped by PID on exit.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

if [[ -n "${BENCH_QUICK:-}" ]]; then
  RUNS=${BENCH_RUNS:-10} WARMUP=${BENCH_WARMUP:-1} RSS_RUNS=${BENCH_RSS_RUNS:-3} STDIO_RUNS=${BENCH_STDIO_RUNS:-5}
else
  RUNS=${BENCH_RUNS:-30} WARMUP=${BENCH_WARMUP:-3} RSS_RUNS=${BENCH_RSS_RUNS:-9} STDIO_RUNS=${BENCH_STDIO_RUNS:-20}
fi
# The Inspector and stdio probes take 0.3-2.5 s each: they get the minimum number of runs.
SLOW_RUNS=${BENCH_SLOW_RUNS:-20}
[[ -n "${BENCH_QUICK:-}" ]] && SLOW_RUNS=${BENCH_SLOW_RUNS:-5}

log() { printf '\033[1mbench:\033[0m %s\n' "$*" >&2; }

# --- prerequisites ----------------------------------------------------------------------------
log "building mcpulse (release)"
cargo build --release -p mcpulse >&2
GIT_REV="$(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD -- crates Cargo.toml Cargo.lock 2>/dev/null || echo ', with uncommitted changes')"

log "installing the third-party servers and clients (scripts/interop-setup.sh)"
interop="$(bash scripts/interop-setup.sh)"
B="$interop/npm/node_modules/.bin"
PY2="$interop/py2"
EVERYTHING="$B/mcp-server-everything"
INSPECTOR="$B/mcp-inspector"

if ! command -v hyperfine >/dev/null; then
  log "installing hyperfine (apt-get)"
  apt-get install -y hyperfine >&2 || { apt-get update >&2 && apt-get install -y hyperfine >&2; }
fi
[[ -x /usr/bin/time ]] || { apt-get install -y time >&2; }

# The real interpreter, not a pyenv shim (a shim is a shell script that costs ~30 ms a start).
PYTHON="$(python3 -c 'import sys; print(sys.executable)')"

work="$(mktemp -d "${TMPDIR:-/tmp}/mcpulse-bench.XXXXXX")"
# A copy: target/release may be rebuilt by other work while the benchmark runs.
cp "$root/target/release/mcpulse" "$work/mcpulse"
MCPULSE="$work/mcpulse"
server_pids=()
cleanup() {
  local p
  for p in "${server_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${server_pids[@]}"; do wait "$p" 2>/dev/null || true; done
  if [[ -z "${BENCH_KEEP:-}" ]]; then rm -rf "$work"; else log "kept $work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

RUSTC_VERSION="$(rustc --version)"

# The Inspector writes a catalog and client config under $HOME unless told otherwise.
mkdir -p "$work/home"
export HOME="$work/home" MCP_CATALOG_PATH="$work/home/catalog.json" MCP_CLIENT_CONFIG_PATH="$work/home/client.json"
export NO_COLOR=1

free_port() { "$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

wait_http() { # URL: until anything answers (any status), 20 s at most
  local i
  for i in $(seq 200); do
    # Any HTTP status will do (an SSE endpoint answers a GET with a stream that never ends).
    [[ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 0.5 "$1" || true)" != 000 ]] && return 0
    sleep 0.1
  done
  log "server at $1 did not come up"; return 1
}

LOAD_START="$(cut -d' ' -f1-3 /proc/loadavg)"

# --- servers ----------------------------------------------------------------------------------
P_LEG=$(free_port); P_SSE=$(free_port); P_MOD=$(free_port)
log "starting servers on 127.0.0.1:$P_LEG (legacy Streamable HTTP), :$P_SSE (legacy HTTP+SSE), :$P_MOD (modern)"
PORT=$P_LEG node "$EVERYTHING" streamableHttp >"$work/server-legacy-http.log" 2>&1 &
server_pids+=($!)
PORT=$P_SSE node "$EVERYTHING" sse >"$work/server-legacy-sse.log" 2>&1 &
server_pids+=($!)
PYTHONPATH="$PY2" "$PYTHON" bench/modern_server.py http "$P_MOD" >"$work/server-modern-http.log" 2>&1 &
server_pids+=($!)
URL_LEG="http://127.0.0.1:$P_LEG/mcp"
URL_SSE="http://127.0.0.1:$P_SSE/sse"
URL_MOD="http://127.0.0.1:$P_MOD/mcp"
wait_http "$URL_LEG"; wait_http "$URL_SSE"; wait_http "$URL_MOD"

# Warm the servers up before anything is timed: node and CPython servers answer their first
# few hundred requests several times slower (V8 compiles hot code as it goes), and timing that
# would measure the servers' warm-up, not the clients. SERVER_WARMUP probes of each kind the
# benchmark times (auto, pinned, min) per server.
SERVER_WARMUP=${BENCH_SERVER_WARMUP:-150}
log "warming the servers up ($SERVER_WARMUP probes of each kind per server)"
for spec in "$URL_LEG|--era legacy" "$URL_SSE|--transport sse" "$URL_MOD|--era modern"; do
  url=${spec%%|*} pinned=${spec#*|}
  for ((i = 0; i < SERVER_WARMUP; i++)); do
    "$MCPULSE" probe "$url" >/dev/null 2>&1 || true
    # shellcheck disable=SC2086
    "$MCPULSE" probe $pinned "$url" >/dev/null 2>&1 || true
    # shellcheck disable=SC2086
    "$MCPULSE" probe $pinned --no-security "$url" >/dev/null 2>&1 || true
  done
done

# --- helpers ----------------------------------------------------------------------------------
cmds="$work/commands.tsv"   # group, id, command line: what hyperfine timed
: >"$cmds"

# check GROUP ID CMD...: one run, which must exit 0 (a benchmark of a failing probe is no benchmark).
check() {
  local g=$1 id=$2; shift 2
  if ! "$@" >"$work/check-$g-$id.out" 2>"$work/check-$g-$id.err"; then
    log "$g/$id failed (exit $?):"; head -c 2000 "$work/check-$g-$id.err" >&2; head -c 2000 "$work/check-$g-$id.out" >&2
    return 1
  fi
}

# rss GROUP ID CMD...: peak RSS (KiB, GNU time %M: the largest single process among the command
# and the children it waited for), RSS_RUNS times.
rss() {
  local g=$1 id=$2 i; shift 2
  : >"$work/rss-$g-$id.txt"
  for ((i = 0; i < RSS_RUNS; i++)); do
    /usr/bin/time -o "$work/time.out" -f '%M' "$@" >/dev/null 2>&1 || true
    tail -n 1 "$work/time.out" >>"$work/rss-$g-$id.txt"
  done
}

# The machine may be shared: before each timed block, wait (at most BENCH_QUIET_WAIT seconds)
# until other work leaves the CPUs nearly idle (under BENCH_MAX_BUSY percent busy over 2 s,
# servers idle), and record what it was.
MAX_BUSY=${BENCH_MAX_BUSY:-15}
QUIET_WAIT=${BENCH_QUIET_WAIT:-300}
cpu_busy() { # percent of all CPUs busy over the next 2 s
  local a b
  a=$(head -n 1 /proc/stat); sleep 2; b=$(head -n 1 /proc/stat)
  awk -v a="$a" -v b="$b" 'BEGIN {
    split(a, x); split(b, y); busy = 0; total = 0
    for (i = 2; i <= 9; i++) { d = y[i] - x[i]; total += d; if (i != 5 && i != 6) busy += d }
    printf "%.0f\n", total ? 100 * busy / total : 0 }'
}
wait_quiet() { # BLOCK
  local waited=0 busy
  while :; do
    busy=$(cpu_busy)
    if ((busy < MAX_BUSY)); then break; fi
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

# bench GROUP RUNS then pairs of ID CMD (CMD as one string, split by hyperfine -N, no shell).
bench() {
  local g=$1 runs=$2; shift 2
  local args=()
  while (($#)); do
    args+=(-n "$1" "$2")
    printf '%s\t%s\t%s\n' "$g" "$1" "$2" >>"$cmds"
    shift 2
  done
  wait_quiet "$g"
  log "hyperfine: $g"
  hyperfine -N --style basic -w "$WARMUP" -m "$runs" --export-json "$work/h-$g.json" "${args[@]}" >&2
}

# curl_for GROUP ID TRANSCRIPT: writes the curl equivalent of a probe's requests; prints the
# command that runs it (curl -K FILE for one process, bash FILE for a pipeline).
curl_for() {
  local g=$1 id=$2 tr=$3 info
  info=$("$PYTHON" bench/curl_from_transcript.py "$tr" "$work/curl-$g-$id")
  echo "$info" >"$work/curlinfo-$g-$id.json"
  if [[ -f "$work/curl-$g-$id.curlrc" ]]; then echo "curl -K $work/curl-$g-$id.curlrc"; else echo "bash $work/curl-$g-$id.sh"; fi
}

inspector=("$INSPECTOR" --cli)

# server_cpu PID GROUP ID N CMD...: the server's CPU time (user+system, from /proc/PID/stat)
# per run of CMD, over N runs: how much of a probe's wall time is the server working.
server_cpu() {
  local pid=$1 g=$2 id=$3 n=$4 i a b; shift 4
  a=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  for ((i = 0; i < n; i++)); do "$@" >/dev/null 2>&1 || true; done
  b=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  awk -v a="$a" -v b="$b" -v n="$n" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.2f\n", (b - a) * 1000 / hz / n }' \
    >"$work/srvcpu-$g-$id.txt"
}

# phases GROUP ID CMD...: RUNS more runs of CMD, each writing its transcript, timed from
# outside: where a probe's wall time goes (bench/http_split.py; report.py shows it).
phases() {
  local g=$1 id=$2; shift 2
  "$PYTHON" bench/http_split.py --runs "$RUNS" --warmup "$WARMUP" --out "$work/split-$g-$id.json" -- "$@" >&2
}

# --- HTTP -------------------------------------------------------------------------------------
# http_group GROUP SERVER_PID URL PINNED_FLAGS INSPECTOR_FLAGS
http_group() {
  local g=$1 spid=$2 url=$3 pinned=$4 iflags=$5
  log "== $g: $url"
  # The probes whose requests curl repeats: one transcript each, from a real run.
  check "$g" mcpulse-auto "$MCPULSE" probe "$url" --transcript "$work/tr-$g-auto.json"
  # shellcheck disable=SC2086
  check "$g" mcpulse-pinned "$MCPULSE" probe $pinned "$url" --transcript "$work/tr-$g-pinned.json"
  # shellcheck disable=SC2086
  check "$g" mcpulse-min "$MCPULSE" probe $pinned --no-security "$url" --transcript "$work/tr-$g-min.json"
  local c_auto c_pinned c_min
  c_auto=$(curl_for "$g" curl-auto "$work/tr-$g-auto.json")
  c_pinned=$(curl_for "$g" curl-pinned "$work/tr-$g-pinned.json")
  c_min=$(curl_for "$g" curl-min "$work/tr-$g-min.json")
  # shellcheck disable=SC2086
  check "$g" curl-auto $c_auto
  # shellcheck disable=SC2086
  check "$g" curl-pinned $c_pinned
  # shellcheck disable=SC2086
  check "$g" curl-min $c_min
  # shellcheck disable=SC2086
  check "$g" inspector "${inspector[@]}" "$url" $iflags --method tools/list --format json -q
  bench "$g-fast" "$RUNS" \
    mcpulse-auto "$MCPULSE probe $url" \
    mcpulse-pinned "$MCPULSE probe $pinned $url" \
    mcpulse-min "$MCPULSE probe $pinned --no-security $url" \
    curl-auto "$c_auto" \
    curl-pinned "$c_pinned" \
    curl-min "$c_min"
  bench "$g-inspector" "$SLOW_RUNS" \
    inspector "${inspector[*]} $url $iflags --method tools/list --format json -q"
  log "server CPU per probe: $g"
  server_cpu "$spid" "$g" mcpulse-auto 100 "$MCPULSE" probe "$url"
  # shellcheck disable=SC2086
  server_cpu "$spid" "$g" mcpulse-pinned 100 "$MCPULSE" probe $pinned "$url"
  # shellcheck disable=SC2086
  server_cpu "$spid" "$g" mcpulse-min 100 "$MCPULSE" probe $pinned --no-security "$url"
  # shellcheck disable=SC2086
  server_cpu "$spid" "$g" inspector "$RSS_RUNS" "${inspector[@]}" "$url" $iflags --method tools/list --format json -q
  log "transcripts: $g"
  phases "$g" mcpulse-auto "$MCPULSE" probe "$url"
  # shellcheck disable=SC2086
  phases "$g" mcpulse-pinned "$MCPULSE" probe $pinned "$url"
  # shellcheck disable=SC2086
  phases "$g" mcpulse-min "$MCPULSE" probe $pinned --no-security "$url"
  log "peak RSS: $g"
  rss "$g" mcpulse-auto "$MCPULSE" probe "$url"
  # shellcheck disable=SC2086
  rss "$g" mcpulse-pinned "$MCPULSE" probe $pinned "$url"
  # shellcheck disable=SC2086
  rss "$g" mcpulse-min "$MCPULSE" probe $pinned --no-security "$url"
  # shellcheck disable=SC2086
  rss "$g" curl-min $c_min
  # shellcheck disable=SC2086
  rss "$g" curl-auto $c_auto
  # shellcheck disable=SC2086
  rss "$g" curl-pinned $c_pinned
  # shellcheck disable=SC2086
  rss "$g" inspector "${inspector[@]}" "$url" $iflags --method tools/list --format json -q
}

# The floor under any client process: the exec and exit of one that does nothing.
bench floor 200 true "$(type -P true)"

http_group legacy-http "${server_pids[0]}" "$URL_LEG" "--era legacy" "--transport http --protocol-era legacy"
http_group legacy-sse "${server_pids[1]}" "$URL_SSE" "--transport sse" "--transport sse --protocol-era legacy"
http_group modern-http "${server_pids[2]}" "$URL_MOD" "--era modern" "--transport http --protocol-era modern"

# --- stdio ------------------------------------------------------------------------------------
# stdio_group GROUP PINNED_FLAGS INSPECTOR_FLAGS -- SERVER COMMAND...
stdio_group() {
  local g=$1 pinned=$2 iflags=$3; shift 4
  local server=("$@") id flags
  log "== $g: ${server[*]}"
  check "$g" mcpulse-auto "$MCPULSE" probe --transcript "$work/tr-$g-auto.json" -- "${server[@]}"
  # shellcheck disable=SC2086
  check "$g" mcpulse-pinned "$MCPULSE" probe $pinned --transcript "$work/tr-$g-pinned.json" -- "${server[@]}"
  # shellcheck disable=SC2086
  check "$g" inspector "${inspector[@]}" $iflags --method tools/list --format json -q "${server[@]}"
  bench "$g" "$SLOW_RUNS" \
    mcpulse-auto "$MCPULSE probe -- ${server[*]}" \
    mcpulse-pinned "$MCPULSE probe $pinned -- ${server[*]}" \
    inspector "${inspector[*]} $iflags --method tools/list --format json -q ${server[*]}"
  wait_quiet "$g-timeline"
  log "readiness, verdict and exit times: $g"
  local t="$work/st-transcript.json"
  for id in mcpulse-auto mcpulse-pinned; do
    flags=""; [[ $id == mcpulse-pinned ]] && flags=$pinned
    # shellcheck disable=SC2086
    "$PYTHON" bench/stdio_timing.py --runs "$STDIO_RUNS" --out "$work/st-$g-$id.json" --transcript "$t" \
      -- "$MCPULSE" probe $flags --transcript "$t" -- "${server[@]}"
    log "peak RSS: $g $id"
    # shellcheck disable=SC2086
    "$PYTHON" bench/stdio_timing.py --warmup 0 --runs "$RSS_RUNS" --rss --out "$work/stm-$g-$id.json" \
      -- "$MCPULSE" probe $flags -- "${server[@]}"
    # shellcheck disable=SC2086
    rss "$g" "$id" "$MCPULSE" probe $flags -- "${server[@]}"
  done
  # shellcheck disable=SC2086
  "$PYTHON" bench/stdio_timing.py --runs "$((STDIO_RUNS < 10 ? STDIO_RUNS : 10))" --out "$work/st-$g-inspector.json" \
    -- "${inspector[@]}" $iflags --method tools/list --format json -q "${server[@]}"
  # shellcheck disable=SC2086
  "$PYTHON" bench/stdio_timing.py --warmup 0 --runs "$RSS_RUNS" --rss --out "$work/stm-$g-inspector.json" \
    -- "${inspector[@]}" $iflags --method tools/list --format json -q "${server[@]}"
  # shellcheck disable=SC2086
  rss "$g" inspector "${inspector[@]}" $iflags --method tools/list --format json -q "${server[@]}"
  # Nothing of the server may outlive the probes.
  sleep 0.3
  if pgrep -f -- "${server[*]}\$" >"$work/leftover-$g.txt"; then
    log "$g: server processes left behind: $(tr '\n' ' ' <"$work/leftover-$g.txt")"
  fi
}

stdio_group legacy-stdio "--era legacy" "--protocol-era legacy" -- node "$EVERYTHING" stdio
export PYTHONPATH="$PY2" # for the stdio server that mcpulse starts (the Inspector gets -e)
stdio_group modern-stdio "--era modern" "--protocol-era modern -e PYTHONPATH=$PY2" -- "$PYTHON" "$root/bench/modern_server.py" stdio
unset PYTHONPATH

# --- report -----------------------------------------------------------------------------------
cat >"$work/meta.json" <<EOF
{
  "date": "$(date -u +%Y-%m-%dT%H:%MZ)",
  "nproc": "$(nproc)",
  "cpu": "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')",
  "mem": "$(free -h | awk '/^Mem:/ {print $2}')",
  "kernel": "$(uname -sr)",
  "load_start": "$LOAD_START",
  "server_warmup": $SERVER_WARMUP,
  "load_end": "$(cut -d' ' -f1-3 /proc/loadavg)",
  "mcpulse": "$("$MCPULSE" --version) (git $GIT_REV)",
  "rustc": "$RUSTC_VERSION",
  "node": "$(node --version)",
  "python": "$("$PYTHON" --version 2>&1)",
  "python_exe": "$PYTHON",
  "curl": "$(curl --version | head -n 1 | cut -d' ' -f1-2)",
  "hyperfine": "$(hyperfine --version)",
  "server_everything": "$(node -p "require('$interop/npm/node_modules/@modelcontextprotocol/server-everything/package.json').version")",
  "inspector": "$(node -p "require('$interop/npm/node_modules/@modelcontextprotocol/inspector/package.json').version")",
  "python_mcp": "$(PYTHONPATH="$PY2" "$PYTHON" -c 'import importlib.metadata as m; print(m.version("mcp"))')",
  "runs": "$RUNS", "warmup": "$WARMUP", "slow_runs": "$SLOW_RUNS", "rss_runs": "$RSS_RUNS", "stdio_runs": "$STDIO_RUNS",
  "max_busy": "$MAX_BUSY", "quiet_wait": "$QUIET_WAIT",
  "quick": "${BENCH_QUICK:-}"
}
EOF
"$PYTHON" bench/report.py "$work" "$root/docs/benchmarks.md"
log "wrote docs/benchmarks.md"
