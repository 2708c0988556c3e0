#!/usr/bin/env bash
# User-space instructions per relayed `tools/call echo`, counted by valgrind's callgrind: a
# figure that neither the machine's load nor its CPU's speed moves (the same binary and inputs
# give the same count to within a fraction of a percent), for comparing builds of the gateway
# with each other and with a reference relay. Kernel work (system calls, wake-ups) is not in it:
# bench/gateway/per-request.sh counts that.
#
#   bench/gateway/instructions.sh [N]      (default 3000)
#
# Rows: the gateway over an HTTP upstream (the echo server's Streamable HTTP), and, when
# haproxy is installed, haproxy in front of the same server (HTTP mode, one thread, kept-alive
# upstream connections, no log). Each figure is the difference between a run of N calls and one
# of 1,000, divided by N - 1,000, so that the client's session set-up and uncounted calls fall
# out. Under callgrind a relay runs some 50 times slower: the latencies it sees are not figures.
#
# Environment: MCPULSE (default target/release/mcpulse). Needs valgrind, node, python3.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
here="$root/bench/gateway"
n="${1:-3000}"
mcpulse="${MCPULSE:-$root/target/release/mcpulse}"
[ "$n" -gt 1000 ] || { echo "N must be over 1000" >&2; exit 1; }
command -v valgrind >/dev/null || { echo "needs valgrind (apt-get install valgrind)" >&2; exit 1; }
# shellcheck source=bench/gateway/common.sh
. "$here/common.sh"

# The instructions callgrind counted since the last zeroing, in the newest dump of PID.
counted() {
  local pid="$1" file
  callgrind_control -d "$pid" >/dev/null 2>&1
  sleep 0.5
  file="$(ls -t "$work"/cg.out."$pid"* | head -1)"
  callgrind_annotate "$file" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1; exit}'
}

# measure LABEL PORT PID: instructions a call through the relay on PORT (callgrind's PID).
measure() {
  local label="$1" port="$2" pid="$3" url a b
  url="http://127.0.0.1:$port/mcp"
  wait_port "$port"
  node "$here/client.cjs" latency 300 "$url" >/dev/null
  callgrind_control -z "$pid" >/dev/null 2>&1
  node "$here/client.cjs" latency 1000 "$url" >/dev/null
  a="$(counted "$pid")"
  callgrind_control -z "$pid" >/dev/null 2>&1
  node "$here/client.cjs" latency "$n" "$url" >/dev/null
  b="$(counted "$pid")"
  python3 -c "import sys; a, b, n = map(int, sys.argv[1:4]); print(f'{sys.argv[4]}: {(b - a) / (n - 1000):,.0f} instructions a call')" "$a" "$b" "$n" "$label"
}

up_port="$(python3 "$here/report.py" free-port)"
node "$here/echo_server.cjs" http "$up_port" >"$work/up.log" 2>&1 &
pids+=($!)
wait_port "$up_port"

gw_port="$(python3 "$here/report.py" free-port)"
valgrind --tool=callgrind --callgrind-out-file="$work/cg.out.%p" \
  "$mcpulse" gateway --listen "127.0.0.1:$gw_port" --upstream "http://127.0.0.1:$up_port/mcp" \
  >"$work/gw.log" 2>&1 &
gw=$!
pids+=("$gw")
measure "gateway (http)" "$gw_port" "$gw"
kill -TERM "$gw" 2>/dev/null || true

if command -v haproxy >/dev/null; then
  hp_port="$(python3 "$here/report.py" free-port)"
  printf 'global\n  nbthread 1\ndefaults\n  mode http\n  timeout connect 5s\n  timeout client 60s\n  timeout server 60s\n  http-reuse always\n  option http-keep-alive\nfrontend f\n  bind 127.0.0.1:%s\n  default_backend b\nbackend b\n  server s 127.0.0.1:%s\n' \
    "$hp_port" "$up_port" >"$work/haproxy.cfg"
  valgrind --tool=callgrind --callgrind-out-file="$work/cg.out.%p" \
    haproxy -f "$work/haproxy.cfg" -db >"$work/haproxy.log" 2>&1 &
  hp=$!
  pids+=("$hp")
  measure "haproxy $(haproxy -v | awk 'NR==1 {print $3}')" "$hp_port" "$hp"
fi
