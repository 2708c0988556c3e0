#!/usr/bin/env bash
# The gateway benchmark (issue #19, "Performance"): the same client against the same server,
# in one run, interleaved round by round so that a change of the machine's speed falls on every
# path alike:
#   direct          the server's own Streamable HTTP;
#   gateway (http)  `mcpulse gateway --upstream` in front of that HTTP;
#   gateway (stdio) `mcpulse gateway -- SERVER stdio`, bridging the server's stdio;
#   supergateway    npm supergateway 4.0.0, stdio -> Streamable HTTP, stateful (a child per
#                   session, as the gateway; its default stateless mode spawns a child per POST);
#   mcp-proxy       PyPI mcp-proxy 0.13.0, stdio -> Streamable HTTP (one child for all sessions).
# And, when installed (Debian: `apt-get install haproxy socat`), two relays that know nothing of
# MCP, in front of the same HTTP server as the gateway, as this machine's floor for any relay:
#   haproxy         HAProxy (Debian 12: 2.6), HTTP mode, one thread, kept-alive upstream
#                   connections (`http-reuse always`);
#   socat           socat, a plain TCP relay (no HTTP parsing at all), a process per connection.
# Writes docs/benchmarks-gateway.md.
#
#   bench/gateway/run.sh [ROUNDS]          (default 3)
#
# The server is bench/gateway/echo_server.cjs (Node, no SDK: stdio and HTTP, four methods), so
# that what is measured is the path, not the server; the client is bench/gateway/client.cjs
# (Node's http, keep-alive), identical for every path. Figures:
#   latency     one session, LATENCY_N sequential `tools/call echo` (after 200 uncounted);
#   paired      every path up at once (the HTTP ones in front of one shared server), one session
#               each, LATENCY_N rounds of one call per path in turn: each path's latency and
#               its difference from direct's in the same round, so that the machine's changes
#               of speed (this is a shared VM) fall on every path alike; then ROTATIONS
#               rotations of a SHORT_SECONDS throughput burst per path (C = 1 and 32), each
#               path's calls/s as a share of direct's in the same rotation;
#   throughput  C client sessions at once (C = 1 and 32), calling back to back for
#               THROUGHPUT_SECONDS; calls/s;
#   memory      RSS of the path's process tree (the bridge and its children; for direct, the
#               server) after one warm-up session, then with IDLE_SESSIONS idle sessions open;
#               and of the bridge's own process alone (a child per session is the server's
#               memory, the same for every bridge that runs one).
#
# Environment:
#   MCPULSE             the mcpulse binary (default: target/release/mcpulse; not built here:
#                       `cargo build --release -p mcpulse` first). Without a working
#                       `mcpulse gateway` its rows are left out, with a note, never faked.
#   LATENCY_N, THROUGHPUT_SECONDS, IDLE_SESSIONS   the loads (3000, 5, 16)
#   ROTATIONS, SHORT_SECONDS   the paired phase's throughput bursts (5 rotations of 1 s)
#   BENCH_REFERENCE     0: leave out the haproxy and socat rows even when they are installed
#   BENCH_NICE          run every measured process (servers, bridges, client) at this nice
#                       value, say -10, so that other work on a shared machine disturbs the
#                       paths less (all paths alike); unset: not changed
#   BENCH_NOTE          a line for the report (for example, which build MCPULSE is)
#   BENCH_MODES         only these paths, comma-separated (say "direct,gateway (http),gateway
#                       (stdio)" for a quick run of the gateway against direct); default: all
#   BENCH_OUT           where the report goes (default docs/benchmarks-gateway.md, replaced;
#                       another file keeps that page's tables, to be added to it by hand)
#
# Needs scripts/interop-setup.sh's installs (supergateway, mcpproxy), node, python3.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
here="$root/bench/gateway"
cache="$root/target/bench-gateway"
interop="$root/target/interop"
rounds="${1:-3}"
N="${LATENCY_N:-3000}"
SECS="${THROUGHPUT_SECONDS:-5}"
IDLE="${IDLE_SESSIONS:-16}"
SUPERGATEWAY_PIN=4.0.0
MCP_PROXY_PIN=0.13.0
mkdir -p "$cache"

sg="$interop/supergateway/node_modules/.bin/supergateway"
[ -e "$sg" ] && [ -d "$interop/mcpproxy/mcp_proxy" ] \
  || { echo "run scripts/interop-setup.sh first (supergateway, mcp-proxy)" >&2; exit 1; }
echo_server="$here/echo_server.cjs"
client="$here/client.cjs"
helper="$here/report.py"

notes=()
[ -n "${BENCH_NOTE:-}" ] && notes+=("$BENCH_NOTE")
nice_cmd=()
if [ -n "${BENCH_NICE:-}" ]; then
  nice_cmd=(nice -n "$BENCH_NICE")
  notes+=("Every measured process (server, bridges, client) ran at nice $BENCH_NICE, so that the other work on this shared machine disturbed the paths less; all paths alike.")
fi

modes=(direct)
mcpulse="${MCPULSE:-$root/target/release/mcpulse}"
if [ ! -x "$mcpulse" ]; then
  notes+=("No mcpulse binary at $mcpulse (set MCPULSE to a release build with the gateway, #19): the gateway rows are pending.")
else
  said="$(timeout 10 "$mcpulse" gateway --listen 127.0.0.1:0 -- true </dev/null 2>&1 || true)"
  if [[ "$said" == *"not built yet"* || "$said" == *"unrecognized subcommand"* ]]; then
    notes+=("\`mcpulse gateway\` is not built in $("$mcpulse" --version 2>/dev/null || echo this binary) (issue #19): the gateway rows are pending.")
  else
    modes+=("gateway (http)" "gateway (stdio)")
  fi
fi
modes+=(supergateway mcp-proxy)
if [ "${BENCH_REFERENCE:-1}" != 0 ]; then
  if command -v haproxy >/dev/null; then modes+=(haproxy); else notes+=("haproxy is not installed (\`apt-get install haproxy\`): no haproxy row."); fi
  if command -v socat >/dev/null; then modes+=(socat); else notes+=("socat is not installed (\`apt-get install socat\`): no socat row."); fi
fi
if [ -n "${BENCH_MODES:-}" ]; then
  wanted=()
  for mode in "${modes[@]}"; do
    [[ ",$BENCH_MODES," == *",$mode,"* ]] && wanted+=("$mode")
  done
  [ "${#wanted[@]}" -gt 0 ] || { echo "BENCH_MODES=$BENCH_MODES names no path of: ${modes[*]}" >&2; exit 1; }
  modes=("${wanted[@]}")
fi

results="$cache/results.jsonl"
: > "$results"
work="$(mktemp -d)"
tag="gwbench-$$"
pids=()
# Stops what a round started: SIGTERM, then SIGKILL to each process group, then anything
# still carrying this run's tag (a bridge's orphaned child), by pid.
stop_all() {
  local p
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for _ in $(seq 50); do
    local alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.1
  done
  for p in "${pids[@]}"; do kill -KILL -- "-$p" 2>/dev/null || true; done
  for p in $(python3 "$helper" tagged "$tag"); do kill -KILL "$p" 2>/dev/null || true; done
  pids=()
}
trap 'stop_all; rm -rf "$work"' EXIT

# start LOG CMD...: starts CMD tagged, in its own process group (setsid), output to LOG.
start() {
  local log="$1"; shift
  : > "$log"  # emptied now, not by the background job: a reader must never see an old line
  env MCPULSE_BENCH_TAG="$tag" "${nice_cmd[@]}" setsid "$@" >"$log" 2>&1 &
  pids+=("$!")
  last_pid=$!
}

wait_port() {  # wait_port PORT PID
  for _ in $(seq 300); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

wait_gateway_url() {  # wait_gateway_url LOG PID: prints the URL the gateway says it serves
  for _ in $(seq 300); do
    local url
    url="$(sed -n 's/.*mcpulse gateway: listening on \(http[^ ]*\).*/\1/p' "$1" | head -1)"
    [ -n "$url" ] && { echo "$url"; return 0; }
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

# http_upstream: the HTTP server a path fronts: the shared one (shared_port, in the paired
# phase), or a new one; sets port.
http_upstream() {
  if [ -n "${shared_port:-}" ]; then port=$shared_port; return 0; fi
  port="$(python3 "$helper" free-port)"
  start "$work/upstream.log" node "$echo_server" http "$port"
  wait_port "$port" "$last_pid"
}

# up MODE: starts the path; sets url and tree (the pid whose process tree is the path's memory).
up() {
  local port up_port
  case "$1" in
    direct)
      if [ -n "${shared_port:-}" ]; then url="http://127.0.0.1:$shared_port/mcp"; return 0; fi
      port="$(python3 "$helper" free-port)"
      start "$work/direct.log" node "$echo_server" http "$port"
      tree=$last_pid; url="http://127.0.0.1:$port/mcp"
      wait_port "$port" "$tree" ;;
    "gateway (http)")
      http_upstream || return 1
      start "$work/gateway-http.log" "$mcpulse" gateway --listen 127.0.0.1:0 --upstream "http://127.0.0.1:$port/mcp"
      tree=$last_pid
      url="$(wait_gateway_url "$work/gateway-http.log" "$tree")" ;;
    haproxy)
      http_upstream || return 1
      up_port=$port
      port="$(python3 "$helper" free-port)"
      printf '%s\n' global '  nbthread 1' defaults '  mode http' '  timeout connect 5s' \
        '  timeout client 60s' '  timeout server 60s' '  http-reuse always' frontend\ f \
        "  bind 127.0.0.1:$port" '  default_backend b' backend\ b "  server s 127.0.0.1:$up_port" \
        > "$work/haproxy-$port.cfg"
      start "$work/haproxy.log" haproxy -db -f "$work/haproxy-$port.cfg"
      tree=$last_pid; url="http://127.0.0.1:$port/mcp"
      wait_port "$port" "$tree" ;;
    socat)
      http_upstream || return 1
      up_port=$port
      port="$(python3 "$helper" free-port)"
      start "$work/socat.log" socat "TCP-LISTEN:$port,bind=127.0.0.1,fork,reuseaddr,nodelay" "TCP:127.0.0.1:$up_port,nodelay"
      tree=$last_pid; url="http://127.0.0.1:$port/mcp"
      wait_port "$port" "$tree" ;;
    "gateway (stdio)")
      start "$work/gateway-stdio.log" "$mcpulse" gateway --listen 127.0.0.1:0 -- node "$echo_server" stdio
      tree=$last_pid
      url="$(wait_gateway_url "$work/gateway-stdio.log" "$tree")" ;;
    supergateway)
      port="$(python3 "$helper" free-port)"
      start "$work/supergateway.log" node "$sg" --stdio "node $echo_server stdio" \
        --outputTransport streamableHttp --stateful --port "$port"
      tree=$last_pid; url="http://127.0.0.1:$port/mcp"
      wait_port "$port" "$tree" ;;
    mcp-proxy)
      port="$(python3 "$helper" free-port)"
      start "$work/mcp-proxy.log" env PYTHONPATH="$interop/mcpproxy" python3 -m mcp_proxy \
        --host 127.0.0.1 --port "$port" -- node "$echo_server" stdio
      tree=$last_pid; url="http://127.0.0.1:$port/mcp"
      wait_port "$port" "$tree" ;;
  esac
}

record() {  # record MODE JSON
  python3 -c 'import json,sys; r=json.loads(sys.argv[1]); r["mode"]=sys.argv[2]; print(json.dumps(r))' "$2" "$1" >> "$results"
  echo "  $1: $2" >&2
}

measure() {  # measure MODE
  local mode="$1" out rss0 rssn self0 selfn
  if ! up "$mode"; then
    echo "  $mode: did not start; its log:" >&2
    tail -5 "$work"/*.log >&2 || true
    return 1
  fi
  # One session first: whatever a path sets up on first use is not counted as a session's.
  "${nice_cmd[@]}" node "$client" latency 50 "$url" >/dev/null || return 1
  sleep 1
  read -r rss0 self0 < <(python3 "$helper" tree-rss "$tree")
  rm -f "$work/hold"; mkfifo "$work/hold"
  "${nice_cmd[@]}" node "$client" idle "$IDLE" "$url" <"$work/hold" >"$work/idle.out" 2>"$work/idle.err" &
  local holder=$!
  exec 7>"$work/hold"
  for _ in $(seq 1200); do
    grep -q READY "$work/idle.err" 2>/dev/null && break
    kill -0 "$holder" 2>/dev/null || break
    sleep 0.1
  done
  if grep -q READY "$work/idle.err"; then
    sleep 1
    read -r rssn selfn < <(python3 "$helper" tree-rss "$tree")
    record "$mode" "{\"kind\":\"memory\",\"sessions\":$IDLE,\"rss0_kib\":$rss0,\"rssn_kib\":$rssn,\"self0_kib\":$self0,\"selfn_kib\":$selfn}"
  else
    echo "  $mode: $IDLE idle sessions could not be opened: $(cat "$work/idle.err")" >&2
  fi
  exec 7>&-
  wait "$holder" || true
  out="$("${nice_cmd[@]}" node "$client" latency "$N" "$url")" && record "$mode" "$out"
  out="$("${nice_cmd[@]}" node "$client" throughput "$SECS" 1 "$url")" && record "$mode" "$out"
  out="$("${nice_cmd[@]}" node "$client" throughput "$SECS" 32 "$url")" && record "$mode" "$out"
}

# paired: every path up at once, the HTTP ones in front of one shared server; one
# `client.cjs paired` run over all of them.
paired() {
  local urls=() m out
  port="$(python3 "$helper" free-port)"
  start "$work/shared.log" node "$echo_server" http "$port"
  wait_port "$port" "$last_pid" || return 1
  shared_port=$port
  for m in "${modes[@]}"; do
    if ! up "$m"; then echo "  $m: did not start (paired)" >&2; shared_port=""; return 1; fi
    urls+=("$url")
  done
  shared_port=""
  out="$("${nice_cmd[@]}" node "$client" paired "$N" "${urls[@]}")" || return 1
  for i in "${!modes[@]}"; do
    record "${modes[$i]}" "$(python3 -c 'import json,sys; r=json.loads(sys.argv[1]); p=r["paths"][int(sys.argv[2])]; p.update(kind="paired", n=r["n"]); print(json.dumps(p))' "$out" "$i")"
  done
  # Throughput bursts, rotating over the paths (the starting path moves each rotation).
  local rot k i c n=${#modes[@]}
  for rot in $(seq 1 "${ROTATIONS:-5}"); do
    for k in $(seq 0 $((n - 1))); do
      i=$(( (k + rot) % n ))
      for c in 1 32; do
        out="$("${nice_cmd[@]}" node "$client" throughput "${SHORT_SECONDS:-1}" "$c" "${urls[$i]}")" || continue
        record "${modes[$i]}" "$(python3 -c 'import json,sys; r=json.loads(sys.argv[1]); r.update(kind="burst", round=int(sys.argv[2]), rotation=int(sys.argv[3])); print(json.dumps(r))' "$out" "$round" "$rot")"
      done
    done
  done
}

loads=()
for round in $(seq 1 "$rounds"); do
  echo "round $round/$rounds (${modes[*]})" >&2
  for mode in "${modes[@]}"; do
    loads+=("$(cut -d' ' -f1 /proc/loadavg)")
    measure "$mode" || echo "  $mode: FAILED this round" >&2
    stop_all
  done
  echo "round $round/$rounds: paired latency" >&2
  paired || echo "  paired: FAILED this round" >&2
  stop_all
done

out="${BENCH_OUT:-$root/docs/benchmarks-gateway.md}"
{
  echo "# mcpulse gateway: benchmark"
  echo
  echo "Written by \`bench/gateway/run.sh\` on $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs (shared), commit $(git -C "$root" rev-parse --short HEAD), $rounds rounds interleaved (every path once per round), Node $(node --version), $("$mcpulse" --version 2>/dev/null || echo "no mcpulse"). One-minute load average at each path's start: $(printf '%s\n' "${loads[@]}" | sort -n | head -1) to $(printf '%s\n' "${loads[@]}" | sort -n | tail -1). Compare figures within one run only."
  echo
  echo "Same server, same client, same run. The server is \`bench/gateway/echo_server.cjs\` (Node, no SDK), one program over stdio and over Streamable HTTP, so that the server is not what is measured; the client is \`bench/gateway/client.cjs\` (Node's http module, keep-alive, legacy 2025-11-25 sessions; it reads a reply as JSON or as an SSE stream, whichever the path sends). Paths:"
  echo "- **direct**: the server's own Streamable HTTP;"
  echo "- **gateway (http)**: \`mcpulse gateway --listen 127.0.0.1:0 --upstream URL\` in front of that HTTP server;"
  echo "- **gateway (stdio)**: \`mcpulse gateway --listen 127.0.0.1:0 -- node echo_server.cjs stdio\`;"
  echo "- **supergateway**: npm supergateway $SUPERGATEWAY_PIN, \`--stdio 'node echo_server.cjs stdio' --outputTransport streamableHttp --stateful\` (a child per session; its default, stateless mode, spawns a child per request);"
  echo "- **mcp-proxy**: PyPI mcp-proxy $MCP_PROXY_PIN, \`mcp-proxy --port P -- node echo_server.cjs stdio\` (one child shared by every session)."
  if [[ " ${modes[*]} " == *" haproxy "* || " ${modes[*]} " == *" socat "* ]]; then
    echo "- for this machine's floor, relays that know nothing of MCP, in front of the same HTTP server as the gateway (none checks a header, counts a metric or writes a log line):"
    [[ " ${modes[*]} " == *" haproxy "* ]] && echo "  **haproxy** ($(haproxy -v 2>/dev/null | head -1 | awk '{print $1, $3}'), HTTP mode, \`nbthread 1\`, \`http-reuse always\`: kept-alive upstream connections);"
    [[ " ${modes[*]} " == *" socat "* ]] && echo "  **socat** ($(socat -V 2>/dev/null | sed -n 's/^socat version \([^ ]*\).*/\1/p' | head -1), a plain TCP relay, no HTTP parsing, a process per connection)."
  fi
  echo
  echo "Reproduce: \`scripts/interop-setup.sh\`, \`apt-get install haproxy socat\` (optional: the reference rows), \`cargo build --release --locked -p mcpulse\`, then \`BENCH_NICE=-10 bench/gateway/run.sh 3\` (as root, for the negative nice; see the script's header for the loads)."
  echo
  echo "Every path runs with its default settings, logs to a file. The stdio paths' *added* latency is over the server's own HTTP (direct), as a deployment that could choose either would see it. Targets (issue #19): under 100 µs added at p50 over an HTTP upstream, at least 80% of direct throughput, and ahead of every peer on each figure."
  echo
  echo "Memory per idle session counts the path's whole process tree: where a bridge runs a child per session (the gateway's stdio upstream, supergateway), that is mostly the server's own memory; the last column is the bridge's own process alone. mcp-proxy shares one child among all sessions (so one session's state is every session's)."
  for n in "${notes[@]}"; do echo; echo "Note: $n"; done
  python3 "$helper" report "$results"
  echo
  echo "Raw results (one JSON object a measurement): \`target/bench-gateway/results.jsonl\`."
} > "$out"
echo "wrote $out" >&2
