# Sourced by bench/gateway/per-request.sh and instructions.sh: a scratch directory ($work) and
# the processes the script starts ($pids), both gone when it exits; wait_port PORT.
work="$(mktemp -d)"
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# Waits (up to 30 s) until something accepts on 127.0.0.1:PORT.
wait_port() {
  for _ in $(seq 300); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done
  echo "nothing listens on 127.0.0.1:$1" >&2
  exit 1
}
