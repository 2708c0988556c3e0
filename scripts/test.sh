#!/usr/bin/env bash
# The whole test suite, in one command, on a fresh machine:
#   1. scripts/interop-setup.sh installs the pinned third-party MCP servers that the interop
#      tests (crates/mcpulse/tests/interop.rs) run against, into target/interop/ (idempotent:
#      quick when they are already there);
#   2. scripts/ci-packages.sh installs the Debian packages prometheus, prometheus-alertmanager and sqlite3
#      that crates/mcpulse/tests/prometheus.rs runs (a quick dpkg check when they are there;
#      installing them needs root: run this as root, or run `sudo scripts/ci-packages.sh` once);
#   3. every test of the workspace, with Cargo.lock as committed.
# Extra arguments go to `cargo test` (e.g. scripts/test.sh -p mcpulse --test interop).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

echo "== interop servers (scripts/interop-setup.sh)"
bash scripts/interop-setup.sh >/dev/null

echo "== Debian packages (scripts/ci-packages.sh)"
bash scripts/ci-packages.sh

echo "== cargo test --workspace --locked $*"
cargo test --workspace --locked "$@"
