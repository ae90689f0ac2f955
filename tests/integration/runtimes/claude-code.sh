#!/usr/bin/env bash
# The real Claude Code CLI, for tests/integration/test_claude_code_real.py: the npm package
# `@anthropic-ai/claude-code` and its linux-x64 platform package, pinned, installed once into
# .tools/claude-code without install scripts. The wrapper's postinstall (install.cjs) only
# copies the platform package's native binary over its bin/claude.exe placeholder, so the test
# runs that native binary directly: no Node.js is needed to run it (the platform package has
# no scripts of its own). Prints one line: the claude binary.
set -euo pipefail
CLAUDE_CODE_VERSION="${CLAUDE_CODE_VERSION:-2.1.332}"
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
DIR="$REPO/.tools/claude-code/$CLAUDE_CODE_VERSION"
case "$(uname -s)-$(uname -m)" in
  Linux-x86_64) PLATFORM=linux-x64 ;;
  Linux-aarch64) PLATFORM=linux-arm64 ;;
  *) echo "claude-code.sh: no pinned Claude Code platform package for $(uname -sm)" >&2; exit 1 ;;
esac
if ldd --version 2>&1 | grep -qi musl; then PLATFORM="$PLATFORM-musl"; fi
CLAUDE="$DIR/node_modules/@anthropic-ai/claude-code-$PLATFORM/claude"
if [ ! -x "$CLAUDE" ]; then
  command -v npm >/dev/null || { echo "claude-code.sh: npm is needed to install Claude Code" >&2; exit 1; }
  mkdir -p "$DIR"
  echo '{"private": true}' > "$DIR/package.json"
  npm install --prefix "$DIR" --ignore-scripts --no-audit --no-fund --loglevel=error \
    "@anthropic-ai/claude-code@$CLAUDE_CODE_VERSION" \
    "@anthropic-ai/claude-code-$PLATFORM@$CLAUDE_CODE_VERSION" >&2
  [ -f "$CLAUDE" ] || { echo "claude-code.sh: the install gave no $CLAUDE" >&2; exit 1; }
  chmod +x "$CLAUDE"
fi
VERSION="$(HOME="$(mktemp -d)" DISABLE_AUTOUPDATER=1 "$CLAUDE" --version)"
case "$VERSION" in
  "$CLAUDE_CODE_VERSION"*) ;;
  *) echo "claude-code.sh: $CLAUDE says '$VERSION', not $CLAUDE_CODE_VERSION" >&2; exit 1 ;;
esac
echo "$CLAUDE"
