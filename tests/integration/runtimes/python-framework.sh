#!/usr/bin/env bash
# An agent framework whose pins conflict with the dev environment's (google-adk, crewai), in a
# virtual environment of its own: .tools/python-frameworks/<name>-<version>, made once with the
# framework pinned and loopwatch's own dependencies (from pyproject.toml), and a .pth file that
# puts this checkout on sys.path, so the environment imports the checkout's loopwatch (its
# compiled core too: the same interpreter built it) and the tests' drivers without installing it.
# Usage: python-framework.sh NAME  (NAME: google-adk or crewai). Prints one line: its python.
set -euo pipefail
NAME="${1:?usage: python-framework.sh google-adk|crewai}"
case "$NAME" in
  google-adk) REQUIREMENTS=("google-adk==${GOOGLE_ADK_VERSION:-2.13.0}") ;;
  crewai) REQUIREMENTS=("crewai==${CREWAI_VERSION:-1.15.30}") ;;
  *) echo "python-framework.sh: no pinned framework named '$NAME' (google-adk, crewai)" >&2; exit 1 ;;
esac
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
PYTHON="${PYTHON:-python3}"
TAG="$(printf '%s\n' "${REQUIREMENTS[@]}" | tr -d '=<>' | tr '\n' '-' | sed 's/-$//')"
DIR="$REPO/.tools/python-frameworks/$TAG"
STAMP="$DIR/.installed"
if [ ! -f "$STAMP" ] || [ "$REPO/pyproject.toml" -nt "$STAMP" ]; then
  rm -rf "$DIR"
  "$PYTHON" -m venv "$DIR"
  mapfile -t DEPENDENCIES < <("$DIR/bin/python" -c '
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    print("\n".join(tomllib.load(f)["project"]["dependencies"]))' "$REPO/pyproject.toml")
  "$DIR/bin/pip" install -q --disable-pip-version-check "${REQUIREMENTS[@]}" "${DEPENDENCIES[@]}" >&2
  SITE="$("$DIR/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  echo "$REPO" > "$SITE/loopwatch-checkout.pth"
  "$DIR/bin/python" -c 'import loopwatch.integrations' \
    || { echo "python-framework.sh: $DIR does not import loopwatch from $REPO" >&2; exit 1; }
  touch "$STAMP"
fi
echo "$DIR/bin/python"
