#!/usr/bin/env bash
# The whole test suite, in one command, on a fresh machine:
#   1. scripts/interop-setup.sh installs the pinned third-party MCP servers that the interop
#      tests (crates/mcpulse/tests/interop.rs) run against, into target/interop/ (idempotent:
#      quick when they are already there);
#   2. scripts/ci-packages.sh installs the Debian packages the tests run: prometheus and
#      prometheus-alertmanager (crates/mcpulse/tests/prometheus.rs, scaleout.rs), sqlite3
#      (history.rs), chromium (browser.rs), zsh, fish, groff-base, systemd (systemd-analyze)
#      and python3-yaml (packaging.rs) (a quick dpkg check when they are there; installing them needs root: run
#      this as root, or run `sudo scripts/ci-packages.sh` once);
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

# README's install line, `cargo install --path crates/mcpulse --locked`, as a user runs it
# (docs/packaging.md): here in the debug profile, so it reuses the build the tests just made
# (the workspace's target/), and only for a whole-suite run.
if [ "$#" -eq 0 ]; then
  echo "== cargo install --path crates/mcpulse --locked (--debug, into a scratch root)"
  install_root="$(mktemp -d)"
  cargo install --path crates/mcpulse --locked --debug --root "$install_root" --quiet
  "$install_root/bin/mcpulse" --version
  rm -rf "$install_root"
fi
