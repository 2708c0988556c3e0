#!/usr/bin/env bash
# Installs the third-party MCP servers and peer clients that the interop tests and
# the benchmark run against, from the package registries, into target/interop/.
# Idempotent: a finished install leaves a stamp file and is not repeated.
# Versions are pinned: these packages change weekly.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${MCPULSE_INTEROP_DIR:-$root/target/interop}"
mkdir -p "$dir"

EVERYTHING=@modelcontextprotocol/server-everything@2026.8.31
INSPECTOR=@modelcontextprotocol/inspector@2.12.0
PY_MCP2="mcp==2.3.0"
PY_MCP1="mcp==1.30.0"

stamp() { [ -f "$dir/$1.done" ]; }
done_() { touch "$dir/$1.done"; }

if ! stamp npm; then
  echo "interop-setup: npm install $EVERYTHING $INSPECTOR" >&2
  npm install --prefix "$dir/npm" --no-audit --no-fund --loglevel=error "$EVERYTHING" "$INSPECTOR" >&2
  done_ npm
fi
if ! stamp py2; then
  echo "interop-setup: pip install $PY_MCP2 uvicorn" >&2
  python3 -m pip install --quiet --disable-pip-version-check --no-warn-conflicts --root-user-action=ignore --target "$dir/py2" "$PY_MCP2" uvicorn >&2
  done_ py2
fi
if ! stamp py1; then
  echo "interop-setup: pip install $PY_MCP1" >&2
  python3 -m pip install --quiet --disable-pip-version-check --no-warn-conflicts --root-user-action=ignore --target "$dir/py1" "$PY_MCP1" >&2
  done_ py1
fi
echo "$dir"
