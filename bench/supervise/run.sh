#!/usr/bin/env bash
# The supervisor benchmark (issue #17, "Performance"): a client talking to a real stdio server
# directly, through `mcpulse supervise`, and through a peer relay that does the same job
# (mcp-hot-reload 1.4.2, a stdio proxy that keeps the client's session across a child restart),
# in one run, interleaved round by round so that a change of the machine's speed falls on every
# path alike. Writes docs/benchmarks-supervise.md.
#
#   bench/supervise/run.sh [ROUNDS]        (default 3)
#
# Environment:
#   MCPULSE          the mcpulse binary (default: target/release/mcpulse, built if missing)
#   MCPULSE_BASELINE another mcpulse binary (say, a release build of main before a change), run
#                    as one more path, "supervise (baseline)", interleaved with the others: a
#                    before/after comparison on the same loaded machine in the same run
#   HOT_RELOAD_SRC   a git checkout of github.com/Stefan-Nitu/mcp-hot-reload (default: the
#                    snapshot under /work/.mirror if present, else a clone); it is built once
#                    at the pinned commit into target/bench-supervise/ (npm ci, then tsc)
#   LATENCY_N, THROUGHPUT_M, THROUGHPUT_SIZE   the loads (5000, 100, 1048576)
#   BENCH_NOTE       a line for the report (for example, which build MCPULSE is)
#
# Needs scripts/interop-setup.sh's installs (server-everything), node, npm, python3, git.
# A path that cannot run (the supervisor not built yet, the peer not buildable) is left out of
# the tables with a note, never faked.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
here="$root/bench/supervise"
cache="$root/target/bench-supervise"
rounds="${1:-3}"
N="${LATENCY_N:-5000}"
M="${THROUGHPUT_M:-100}"
SIZE="${THROUGHPUT_SIZE:-1048576}"
HOT_RELOAD_COMMIT=e913f14db2672a42e540a7ff1de9c9617fdaa4cd   # mcp-hot-reload 1.4.2
mkdir -p "$cache"

everything="$root/target/interop/npm/node_modules/.bin/mcp-server-everything"
[ -e "$everything" ] || { echo "run scripts/interop-setup.sh first (server-everything)" >&2; exit 1; }

mcpulse="${MCPULSE:-$root/target/release/mcpulse}"
if [ -z "${MCPULSE:-}" ] && [ ! -x "$mcpulse" ]; then
  (cd "$root" && CARGO_TARGET_DIR="$root/target" cargo build --release --locked -p mcpulse)
fi
notes=()
[ -n "${BENCH_NOTE:-}" ] && notes+=("$BENCH_NOTE")
modes=(direct)
said="$("$mcpulse" supervise -- true </dev/null 2>&1 || true)"
if [[ "$said" == *"not built yet"* ]]; then
  notes+=("\`mcpulse supervise\` is not built in $("$mcpulse" --version 2>/dev/null || echo this binary): its rows are missing.")
else
  modes+=(supervise)
fi
if [ -n "${MCPULSE_BASELINE:-}" ]; then
  modes+=(baseline)
  notes+=("**supervise (baseline)** is \`MCPULSE_BASELINE\` ($("$MCPULSE_BASELINE" --version 2>/dev/null || echo mcpulse)), run as one more path in the same rounds.")
fi

# The peer: mcp-hot-reload, built from source at the pinned commit (it is not on the npm registry).
hr="$cache/mcp-hot-reload"
if [ ! -e "$hr/dist/index.js" ]; then
  src="${HOT_RELOAD_SRC:-}"
  if [ -z "$src" ] && [ -d /work/.mirror/Stefan-Nitu+mcp-hot-reload/repo ]; then
    src=/work/.mirror/Stefan-Nitu+mcp-hot-reload/repo
  fi
  if [ -z "$src" ]; then
    src="$cache/mcp-hot-reload.git"
    [ -d "$src" ] || git clone --bare --quiet https://github.com/Stefan-Nitu/mcp-hot-reload.git "$src" || true
  fi
  rm -rf "$hr.tmp" && mkdir -p "$hr.tmp"
  if git -C "$src" archive "$HOT_RELOAD_COMMIT" 2>/dev/null | tar -x -C "$hr.tmp" \
     && (cd "$hr.tmp" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null && npx tsc); then
    rm -rf "$hr" && mv "$hr.tmp" "$hr"
  else
    notes+=("mcp-hot-reload could not be built from $src at $HOT_RELOAD_COMMIT: its rows are missing.")
  fi
fi
[ -e "$hr/dist/index.js" ] && modes+=(mcp-hot-reload)

results="$cache/results.jsonl"
: > "$results"
# mcp-hot-reload watches ./src of its working folder: give it an empty one.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
run() {  # run MODE SERVER_LABEL -- client args... -- server command...
  local mode="$1" label="$2"; shift 3
  local cargs=() ; while [ "$1" != "--" ]; do cargs+=("$1"); shift; done; shift
  local prefix=() out
  case "$mode" in
    supervise) prefix=("$mcpulse" supervise --) ;;
    baseline) prefix=("$MCPULSE_BASELINE" supervise --); mode="supervise (baseline)" ;;
    mcp-hot-reload) prefix=(node "$hr/dist/index.js") ;;
  esac
  if out=$(python3 "$here/client.py" "${cargs[@]}" -- "${prefix[@]}" "$@"); then
    python3 -c 'import json,sys; r=json.loads(sys.argv[1]); r.update(mode=sys.argv[2], server=sys.argv[3]); print(json.dumps(r))' \
      "$out" "$mode" "$label" >> "$results"
    echo "  $mode $label ${cargs[*]}: $out" >&2
  else
    echo "  $mode $label ${cargs[*]}: FAILED" >&2
  fi
}

for round in $(seq 1 "$rounds"); do
  echo "round $round/$rounds (${modes[*]})" >&2
  for mode in "${modes[@]}"; do
    run "$mode" "server-everything 2026.8.31" -- latency "$N" ping -- node "$everything" stdio
    run "$mode" "server-everything 2026.8.31" -- latency "$N" echo -- node "$everything" stdio
    run "$mode" "bench echo server" -- latency "$N" ping -- python3 "$here/echo_server.py"
    run "$mode" "bench echo server" -- throughput "$M" "$SIZE" -- python3 "$here/echo_server.py"
  done
done

out="$root/docs/benchmarks-supervise.md"
{
  echo "# mcpulse supervise: benchmark"
  echo
  echo "Written by \`bench/supervise/run.sh\` on $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs (shared), commit $(git -C "$root" rev-parse --short HEAD), $rounds rounds interleaved (every path once per round), $("$mcpulse" --version 2>/dev/null || echo mcpulse). Compare figures within one run only."
  echo
  echo "The client (\`bench/supervise/client.py\`) sends one request at a time and waits for its reply, as a client waiting on a tool does. *Added* is the path's median minus the direct path's. Paths:"
  echo "- **direct**: the client spawns the server;"
  echo "- **supervise**: \`mcpulse supervise -- SERVER\` with its defaults (heartbeat every 30 s, so none during a run);"
  echo "- **mcp-hot-reload**: the peer, 1.4.2 built from source ($HOT_RELOAD_COMMIT), a stdio proxy that keeps the client's session across a child restart (not on npm; reloaderoo, the other such relay, was not available here)."
  echo
  echo "Throughput uses \`bench/supervise/echo_server.py\`, a tiny echo server of our own (C JSON codec, no SDK), so that the server is not the bottleneck; the client's own JSON encoding of 1 MiB is part of every path's time alike. Targets (issue #17): under 50 µs added at p50, at least 90% of the direct pipe's throughput."
  for n in "${notes[@]}"; do echo; echo "Note: $n"; done
  python3 "$here/client.py" report "$results"
} > "$out"
echo "wrote $out" >&2
