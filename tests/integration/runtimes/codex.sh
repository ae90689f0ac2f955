#!/usr/bin/env bash
# The real Codex CLI (npm `@openai/codex`), pinned, installed once into .tools/codex without
# install scripts. The npm package is a small launcher; the Rust binary comes as the optional
# dependency `@openai/codex-linux-x64` (aliased `npm:@openai/codex@<version>-linux-x64`).
# Prints one line: the native codex binary (it needs no Node.js).
set -euo pipefail
CODEX_VERSION="${CODEX_VERSION:-0.171.0}"
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
DIR="$REPO/.tools/codex/$CODEX_VERSION"
case "$(uname -m)" in
  x86_64) ARCH=x64 TRIPLE=x86_64-unknown-linux-musl ;;
  aarch64) ARCH=arm64 TRIPLE=aarch64-unknown-linux-musl ;;
  *) echo "codex.sh: unsupported machine $(uname -m)" >&2; exit 1 ;;
esac
PKG="$DIR/node_modules/@openai/codex-linux-$ARCH"
find_binary() { { find "$PKG" -type f -name codex -path "*$TRIPLE*" 2>/dev/null || true; } | head -n 1; }
BIN="$(find_binary)"
if [ -z "$BIN" ] || [ ! -x "$BIN" ]; then
  command -v npm >/dev/null || { echo "codex.sh: npm is needed to install @openai/codex" >&2; exit 1; }
  mkdir -p "$DIR"
  echo '{"private": true}' > "$DIR/package.json"
  npm install --prefix "$DIR" --ignore-scripts --no-audit --no-fund --loglevel=error \
    "@openai/codex@$CODEX_VERSION" "@openai/codex-linux-$ARCH@npm:@openai/codex@$CODEX_VERSION-linux-$ARCH" >&2
  BIN="$(find_binary)"
  [ -n "$BIN" ] || { echo "codex.sh: no codex binary for $TRIPLE under $PKG" >&2; exit 1; }
  chmod +x "$BIN"
fi
VERSION_LINE="$("$BIN" --version)"
case "$VERSION_LINE" in
  *"$CODEX_VERSION"*) ;;
  *) echo "codex.sh: $BIN says '$VERSION_LINE', expected $CODEX_VERSION" >&2; exit 1 ;;
esac
echo "$BIN"
