#!/usr/bin/env bash
# The whole test suite, in one command, on a fresh machine:
#   1. scripts/interop-setup.sh installs the pinned third-party MCP servers that the interop
#      tests (crates/mcpulse/tests/interop.rs) run against, into target/interop/ (idempotent:
#      quick when they are already there);
#   2. every test of the workspace, with Cargo.lock as committed.
# Extra arguments go to `cargo test` (e.g. scripts/test.sh -p mcpulse --test interop).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

echo "== interop servers (scripts/interop-setup.sh)"
bash scripts/interop-setup.sh >/dev/null

echo "== cargo test --workspace --locked $*"
cargo test --workspace --locked "$@"
