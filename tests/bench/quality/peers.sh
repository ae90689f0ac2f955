#!/usr/bin/env bash
# Installs the shipped peer loop detectors for the quality benchmark, pinned, in bench-only
# environments under .bench/ (never runtime dependencies of loopwatch):
#   .bench/quality-venv            Python venv: crewai
#   .bench/quality-venv-openhands  Python venv: openhands-sdk (needs Python >= 3.12)
#   .bench/quality-node            npm prefix:  @google/gemini-cli-core
# Two venvs, not one: crewai 1.15.30 requires pydantic<2.13 and openhands-sdk 1.58.2 requires
# pydantic>=2.13.5, so pip cannot install them together.
# Idempotent: a stamp file holding the pins; a second run with the same pins does nothing.
# Quiet: the installers' output goes to .bench/quality-peers.log, shown only on failure.
# Fails loudly: any failed step prints the log's tail and exits non-zero.
#
# PEERS_PYTHON=/path/to/python3.12 chooses the interpreter for both venvs; otherwise the first
# of python3.12, python3.13 on PATH or in pyenv's versions.
set -euo pipefail

CREWAI_VERSION="1.15.30"
OPENHANDS_SDK_VERSION="1.58.2"
GEMINI_CLI_CORE_VERSION="0.61.0"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
bench="$root/.bench"
venv="$bench/quality-venv"
openhands_venv="$bench/quality-venv-openhands"
node_prefix="$bench/quality-node"
stamp="$bench/quality-peers.stamp"
log="$bench/quality-peers.log"
pins="crewai==$CREWAI_VERSION openhands-sdk==$OPENHANDS_SDK_VERSION @google/gemini-cli-core@$GEMINI_CLI_CORE_VERSION"

mkdir -p "$bench"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$pins" && -x "$venv/bin/python" \
      && -x "$openhands_venv/bin/python" \
      && -f "$node_prefix/node_modules/@google/gemini-cli-core/package.json" ]]; then
  exit 0
fi

fail() {
  echo "peers.sh: $1" >&2
  if [[ -f "$log" ]]; then
    echo "peers.sh: last lines of $log:" >&2
    tail -n 40 "$log" >&2
  fi
  exit 1
}

find_python() {
  if [[ -n "${PEERS_PYTHON:-}" ]]; then
    echo "$PEERS_PYTHON"
    return
  fi
  local candidate
  for candidate in python3.12 python3.13; do
    if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c '' >/dev/null 2>&1; then
      command -v "$candidate"
      return
    fi
  done
  local pyenv_root="${PYENV_ROOT:-$HOME/.pyenv}"
  for candidate in "$pyenv_root"/versions/3.12*/bin/python3.12 \
                   "$pyenv_root"/versions/3.13*/bin/python3.13; do
    if [[ -x "$candidate" ]]; then
      echo "$candidate"
      return
    fi
  done
}

rm -f "$stamp"
: >"$log"

python="$(find_python)"
[[ -n "$python" ]] || fail "no Python 3.12 or 3.13 found (openhands-sdk needs >= 3.12); set PEERS_PYTHON"
"$python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' \
  || fail "$python is older than 3.12 (openhands-sdk needs >= 3.12)"
command -v npm >/dev/null 2>&1 || fail "npm not found (needed for @google/gemini-cli-core)"

# make_venv DIR REQUIREMENT...: a fresh venv at DIR with exactly the pinned requirements.
make_venv() {
  local dir="$1"
  shift
  rm -rf "$dir"
  "$python" -m venv "$dir" >>"$log" 2>&1 || fail "could not create $dir with $python"
  "$dir/bin/python" -m pip install --disable-pip-version-check --quiet --upgrade pip \
    >>"$log" 2>&1 || fail "could not upgrade pip in $dir"
  "$dir/bin/python" -m pip install --disable-pip-version-check --quiet "$@" >>"$log" 2>&1 \
    || fail "pip install of $* into $dir failed"
  "$dir/bin/python" - "$@" >>"$log" 2>&1 <<'EOF' || fail "$dir does not hold the pinned $*"
import sys
from importlib.metadata import version
want = dict(arg.split("==") for arg in sys.argv[1:])
got = {name: version(name) for name in want}
assert got == want, (got, want)
EOF
}

make_venv "$venv" "crewai==$CREWAI_VERSION"
make_venv "$openhands_venv" "openhands-sdk==$OPENHANDS_SDK_VERSION"

rm -rf "$node_prefix"
mkdir -p "$node_prefix"
printf '{"name": "loopwatch-quality-peers", "private": true}\n' >"$node_prefix/package.json"
npm install --prefix "$node_prefix" --no-audit --no-fund --loglevel=error --save-exact \
  "@google/gemini-cli-core@$GEMINI_CLI_CORE_VERSION" >>"$log" 2>&1 \
  || fail "npm install of @google/gemini-cli-core@$GEMINI_CLI_CORE_VERSION failed"
node -e '
const v = require(process.argv[1]).version;
if (v !== process.argv[2]) { console.error(`got ${v}`); process.exit(1); }
' "$node_prefix/node_modules/@google/gemini-cli-core/package.json" "$GEMINI_CLI_CORE_VERSION" \
  >>"$log" 2>&1 || fail "installed @google/gemini-cli-core is not $GEMINI_CLI_CORE_VERSION"

echo "$pins" >"$stamp"
