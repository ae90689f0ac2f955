#!/usr/bin/env bash
# The suites of `make test` in two lanes at once, on one Kafka broker and one Redis (started
# before, stopped after, by the Makefile):
#   broker  the integration tests that use the broker or Redis (workers, gateways on Kafka, the
#           fault scenarios; one at a time, as they always ran), then the compiled packages
#           (`make packaging`'s sdist with a C compiler, and the wheel, in fresh environments)
#   rest    every other test: unit, property, differential, and the integration tests of the
#           real runtimes (OpenClaw, Claude Code, Codex, Gemini CLI, the Python frameworks),
#           then the sdist installed with no C compiler and the unit and property tests on it
# Most of the broker lane waits on the broker and on worker processes, and the rest lane is
# mostly CPU: side by side they take the 2 cores a serial run leaves half idle.
# Each line says its lane and the seconds since the start; the lanes' exit codes are kept, the
# first failure of each printed again at the end.
#
# usage: tests/lanes.sh DIST   (DIST: `make dist`'s folder, for the packages)
set -uo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
DIST="${1:?usage: $0 DIST}"
PYTEST=(.venv/bin/pytest -p no:cacheprovider)
START=$(date +%s)
# (no "loopwatch" in the path: tests check that a model never reads the word when nothing blocked)
LOGS="$(mktemp -d "${TMPDIR:-/tmp}/lanes.XXXXXX")"
trap 'rm -rf "$LOGS"' EXIT

mapfile -t BROKER < <(grep -l -E 'kafka_bootstrap|redis_url|start_worker|WorkerProcess' tests/integration/test_*.py)
IGNORE=()
for file in "${BROKER[@]}"; do IGNORE+=("--ignore=$file"); done

lane() {  # lane NAME COMMAND...: the command's lines, each with the lane's name and the time
  local name=$1
  shift
  "$@" 2>&1 | while IFS= read -r line; do
    printf '[%-7s %4ss] %s\n' "$name" "$(($(date +%s) - START))" "$line"
  done | tee -a "$LOGS/$name.log"
  return "${PIPESTATUS[0]}"
}

echo "lanes: broker (${#BROKER[@]} integration files, then the compiled packages) and rest (every other test, then the pure package), side by side"
(lane broker "${PYTEST[@]}" --basetemp="$LOGS/tmp-broker" "${BROKER[@]}" &&
  lane package tests/packaging/check.sh "$DIST" compiled wheel) &
broker=$!
(lane rest "${PYTEST[@]}" --basetemp="$LOGS/tmp-rest" "${IGNORE[@]}" tests &&
  lane pure tests/packaging/check.sh "$DIST" pure) &
rest=$!
wait "$broker"
broker_status=$?
wait "$rest"
rest_status=$?
echo "lanes: broker $([ $broker_status = 0 ] && echo passed || echo FAILED), rest $([ $rest_status = 0 ] && echo passed || echo FAILED), in $(($(date +%s) - START)) s"
for name in broker package rest pure; do
  if [ -f "$LOGS/$name.log" ] && grep -q -E '^\[[a-z ]+ +[0-9]+s\] (FAILED|ERROR|packaging: FAILED)' "$LOGS/$name.log"; then
    echo "== $name: what failed"
    grep -E '^\[[a-z ]+ +[0-9]+s\] (FAILED|ERROR|packaging: FAILED)' "$LOGS/$name.log" | head -40
  fi
done
[ $broker_status = 0 ] && [ $rest_status = 0 ]
