#!/usr/bin/env bash
# Throughput under saturation (issue #20, "Performance"): the gateway in front of an upstream
# that cannot keep up, with and without load limits, in one run, interleaved round by round.
#
#   bench/gateway/saturation.sh [ROUNDS]      (default 2)
#
# The upstream is bench/gateway/echo_server.cjs over HTTP with its `work` tool: a fixed service
# time (SERVICE_MS, 25) and a fixed capacity (SLOTS, 4 at a time: 160 calls/s), its excess
# queued inside the server. The client (client.cjs open) offers RATE calls a second (240, 1.5×
# the capacity) on a fixed schedule for DURATION (10 s), whatever the answers: an open loop, so
# that the queue shows.
#   without limits  `[concurrency] max_concurrent = 100000` and `max_connections = 100000`:
#                   the gateway passes every call on;
#                   the upstream's queue grows by RATE - capacity a second, and so does latency;
#   with limits     `[concurrency] max_concurrent = SLOTS, queue = SLOTS, queue_timeout =
#                   QUEUE_TIMEOUT (100ms)`: the calls past the upstream's capacity are refused
#                   at the door (503 + Retry-After), and the accepted ones keep the service time.
# Prints one JSON line per run, then a Markdown table (medians over the rounds).
#
# Environment: MCPULSE (default target/release/mcpulse), SERVICE_MS, SLOTS, RATE, DURATION,
# QUEUE_TIMEOUT. Needs node, python3.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
here="$root/bench/gateway"
rounds="${1:-2}"
mcpulse="${MCPULSE:-$root/target/release/mcpulse}"
SERVICE_MS="${SERVICE_MS:-25}"
SLOTS="${SLOTS:-4}"
RATE="${RATE:-240}"
DURATION="${DURATION:-10}"
QUEUE_TIMEOUT="${QUEUE_TIMEOUT:-100ms}"
[ -x "$mcpulse" ] || { echo "no mcpulse at $mcpulse: cargo build --release -p mcpulse" >&2; exit 1; }
work="$(mktemp -d)"
pids=()
stop() {
  local p
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}
trap 'stop; rm -rf "$work"' EXIT

# run MODE: one upstream and one gateway, one open-loop run; prints the client's JSON with mode.
run() {
  local mode="$1" port url gw
  port="$(python3 "$here/report.py" free-port)"
  BENCH_SERVICE_MS="$SERVICE_MS" BENCH_SERVICE_SLOTS="$SLOTS" node "$here/echo_server.cjs" http "$port" >"$work/up.log" 2>&1 &
  pids+=("$!")
  for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.05; done
  {
    echo 'listen = "127.0.0.1:0"'
    # The client holds a connection per call in flight: without limits, past the default
    # max_connections (512) the door would shed them, itself a limit.
    [ "$mode" = "with limits" ] || echo 'max_connections = 100000'
    echo '[concurrency]'
    if [ "$mode" = "with limits" ]; then
      echo "max_concurrent = $SLOTS"
      echo "queue = $SLOTS"
      echo "queue_timeout = \"$QUEUE_TIMEOUT\""
    else
      echo 'max_concurrent = 100000'
    fi
    echo '[upstream]'
    echo "url = \"http://127.0.0.1:$port/mcp\""
  } >"$work/gateway.toml"
  "$mcpulse" gateway --config "$work/gateway.toml" >"$work/gw.log" 2>&1 &
  gw=$!; pids+=("$gw")
  url=""
  for _ in $(seq 300); do
    url="$(sed -n 's/.*mcpulse gateway: listening on \(http[^ ]*\).*/\1/p' "$work/gw.log" | head -1)"
    [ -n "$url" ] && break
    kill -0 "$gw" 2>/dev/null || break
    sleep 0.05
  done
  [ -n "$url" ] || { echo "the gateway did not start: $(tail -3 "$work/gw.log")" >&2; exit 1; }
  node "$here/client.cjs" open "$DURATION" "$RATE" "$url" \
    | python3 -c 'import json,sys; r=json.load(sys.stdin); r["mode"]=sys.argv[1]; print(json.dumps(r))' "$mode"
  stop
}

results="$work/results.jsonl"
for r in $(seq "$rounds"); do
  for mode in "without limits" "with limits"; do
    run "$mode" | tee -a "$results"
  done
done
python3 - "$results" "$SERVICE_MS" "$SLOTS" "$RATE" "$DURATION" "$QUEUE_TIMEOUT" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ms, slots, rate, secs, qt = sys.argv[2:7]
cap = int(slots) * 1000 / float(ms)
print(f"\nUpstream capacity {cap:.0f} calls/s ({slots} at a time × {ms} ms); offered {rate} calls/s "
      f"for {secs} s, open loop; with limits: max_concurrent {slots}, queue {slots}, queue_timeout {qt}. "
      f"Medians over {len(rows) // 2} rounds.\n")
print("| gateway | accepted p50 (ms) | p95 (ms) | p99 (ms) | max (ms) | accepted calls/s | shed | shed answered in, p50 (ms) | errors |")
print("|---|---|---|---|---|---|---|---|---|")
for mode in ("without limits", "with limits"):
    rs = [r for r in rows if r["mode"] == mode]
    med = lambda k: statistics.median(r[k] for r in rs if r[k] is not None) if any(r[k] is not None for r in rs) else None
    f = lambda v: "" if v is None else f"{v / 1000:.1f}"
    shed = statistics.median(r["shed"] / r["calls"] for r in rs)
    print(f"| {mode} | {f(med('p50_us'))} | {f(med('p95_us'))} | {f(med('p99_us'))} | {f(med('max_us'))} | "
          f"{med('accepted_per_s'):.0f} | {100 * shed:.0f}% | {f(med('shed_p50_us')) or '-'} | {sum(r['errors'] for r in rs)} |")
PY
