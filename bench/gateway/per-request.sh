#!/usr/bin/env bash
# What the gateway spends per relayed `tools/call echo`, in figures that a loaded machine does
# not move much (unlike latency and throughput): system calls per request (strace -c -f), and
# CPU time and scheduler slices (context switches in) per request (/proc/PID/task/*/schedstat).
#
#   bench/gateway/per-request.sh [http|stdio] [N]      (default: http 3000)
#
# Each figure is a difference between two runs, one of 1,000 calls and one of N, divided by
# N - 1,000, so that start-up, the sessions' set-up and the client's 200 uncounted calls fall
# out. The gateway's own background work (readiness probes every few seconds) is in the
# difference, a small part of it. In stdio mode the system calls include the echo server
# child's (strace follows it; its epoll_pwait, read and one write per request are node's);
# the CPU figures are the gateway's process alone.
#
# Environment: MCPULSE (default target/release/mcpulse); GATEWAY_ARGS, more arguments for the
# gateway (say "--threads 2"). Needs strace, node, python3.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
here="$root/bench/gateway"
mode="${1:-http}"
n="${2:-3000}"
mcpulse="${MCPULSE:-$root/target/release/mcpulse}"
[ "$n" -gt 1000 ] || { echo "N must be over 1000" >&2; exit 1; }
# shellcheck source=bench/gateway/common.sh
. "$here/common.sh"

# run CALLS TRACE: starts upstream and gateway (under strace when TRACE=1), runs CALLS calls;
# prints "CPU_NS SLICES" of the gateway over the calls; strace's table goes to $work/strace.
run() {
  local calls="$1" trace="$2" up="" gw url port prefix=()
  [ "$trace" = 1 ] && prefix=(strace -c -f -o "$work/strace")
  if [ "$mode" = http ]; then
    port="$(python3 "$here/report.py" free-port)"
    node "$here/echo_server.cjs" http "$port" >"$work/up.log" 2>&1 &
    up=$!; pids+=("$up")
    wait_port "$port"
    # shellcheck disable=SC2086
    "${prefix[@]}" "$mcpulse" gateway --listen 127.0.0.1:0 ${GATEWAY_ARGS:-} --upstream "http://127.0.0.1:$port/mcp" >"$work/gw.log" 2>&1 &
  else
    # shellcheck disable=SC2086
    "${prefix[@]}" "$mcpulse" gateway --listen 127.0.0.1:0 ${GATEWAY_ARGS:-} -- node "$here/echo_server.cjs" stdio >"$work/gw.log" 2>&1 &
  fi
  gw=$!; pids+=("$gw")
  url=""
  for _ in $(seq 300); do
    url="$(sed -n 's/.*mcpulse gateway: listening on \(http[^ ]*\).*/\1/p' "$work/gw.log" | head -1)"
    [ -n "$url" ] && break
    sleep 0.05
  done
  if [ -z "$url" ]; then
    echo "the gateway did not start: $(tail -3 "$work/gw.log")" >&2
    kill -TERM "$gw" ${up:+"$up"} 2>/dev/null || true
    exit 1
  fi
  # The gateway's own pid: under strace, strace's child.
  local pid="$gw"
  [ "$trace" = 1 ] && pid="$(pgrep -P "$gw" | head -1)"
  cpu() { cat /proc/"$pid"/task/*/schedstat | awk '{c += $1; s += $3} END {printf "%.0f %.0f\n", c, s}'; }
  local c0 s0 c1 s1
  read -r c0 s0 < <(cpu)
  node "$here/client.cjs" latency "$calls" "$url" >/dev/null
  read -r c1 s1 < <(cpu)
  echo "$((c1 - c0)) $((s1 - s0))"
  kill -TERM "$pid"
  # Bounded: a benchmark never hangs on a gateway that does not stop.
  local waited=0
  while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt 50 ]; do sleep 0.1; waited=$((waited + 1)); done
  if kill -0 "$pid" 2>/dev/null; then
    echo "the gateway ($pid) was still running 5 s after SIGTERM: SIGKILL" >&2
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$gw" 2>/dev/null || true
  [ -n "$up" ] && { kill -TERM "$up"; wait "$up" 2>/dev/null || true; }
  pids=()
}

read -r ca sa < <(run 1000 0)
read -r cb sb < <(run "$n" 0)
[ -n "${ca:-}" ] && [ -n "${cb:-}" ] || { echo "a run failed (see above)" >&2; exit 1; }
run 1000 1 >/dev/null; cp "$work/strace" "$work/a"
run "$n" 1 >/dev/null; cp "$work/strace" "$work/b"
python3 - "$work/a" "$work/b" "$((n - 1000))" "$mode" "$ca" "$cb" "$sa" "$sb" <<'PY'
import sys
def table(path):
    out = {}
    for line in open(path):
        f = line.split()
        if len(f) >= 5 and f[0][0].isdigit() and f[-1] != "total":
            out[f[-1]] = int(f[3])
    return out
a, b, n = table(sys.argv[1]), table(sys.argv[2]), int(sys.argv[3])
per = {k: (b[k] - a.get(k, 0)) / n for k in b}
shown = sorted((k for k in per if abs(per[k]) >= 0.05), key=lambda k: -per[k])
ca, cb, sa, sb = map(int, sys.argv[5:9])
print(f"{sys.argv[4]} upstream, per request (difference of a 1,000-call and a {n + 1000:,}-call run):")
print(f"  system calls {sum(per.values()):.1f}: " + ", ".join(f"{k} {per[k]:.2f}" for k in shown))
print(f"  gateway CPU {(cb - ca) / n / 1000:.0f} µs, scheduler slices {(sb - sa) / n:.2f}")
PY
