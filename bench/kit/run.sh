#!/bin/sh
# mcpulse-kit's overhead per tool call, all policies on, against a plain rmcp server in the
# same run (crates/mcpulse-kit/examples/kit_bench.rs). Figures: docs/kit.md `## Overhead`.
# Usage: bench/kit/run.sh [RUNS] (default 3); each run prints one JSON line.
set -eu
cd "$(dirname "$0")/../.."
runs=${1:-3}
cargo build --release --locked -p mcpulse-kit --example kit_bench >&2
bin="${CARGO_TARGET_DIR:-target}/release/examples/kit_bench"
i=0
while [ "$i" -lt "$runs" ]; do
    "$bin" --calls 20000 --block 500
    i=$((i + 1))
done
