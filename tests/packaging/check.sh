#!/usr/bin/env bash
# loopwatch installed as a user installs it, each package into a fresh virtual environment, and
# run from outside the checkout (`make packaging`, a stage of `make test`):
#   compiled  the sdist, with a C compiler: the compiled core (mypyc's modules and the C ones)
#   pure      the sdist, with no C compiler on the PATH: the uncompiled core (no C module, no
#             mypyc), and the checkout's unit and property tests run against that install
#   wheel     the wheel
# In each: `loopwatch --version` names the core, the conformance vectors of tests/data pass,
# `loopwatch demo` runs and its summary (--json) is the checkout's own, and installed.py checks
# that the package is the environment's, the core asked for.
#
# usage: tests/packaging/check.sh DIST [compiled] [pure] [wheel]   (none named: all three)
# DIST holds one loopwatch-*.tar.gz (and one loopwatch-*.whl for `wheel`): `make dist`.
# Every install goes through make setup's pip (.venv), so pip's cache serves them all; only the
# pure environment gets test tools, and only the ones the unit and property tests import.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
HERE="$ROOT/tests/packaging"
DEV="$ROOT/.venv/bin"
DIST="$(cd "${1:?usage: $0 DIST [compiled] [pure] [wheel]}" && pwd)"
shift
[ $# -gt 0 ] || set -- compiled pure wheel
VECTORS=("$ROOT/tests/data/openclaw-public.jsonl" "$ROOT/tests/data/openclaw-newest.jsonl"
    "$ROOT/tests/data/loopwatch-batch.jsonl")
#: the C property tests: the C modules against their Python twins (make unit runs them)
C_TESTS=(tests/property/test_json_scan.py tests/property/test_raw_json.py tests/property/test_fast_event.py)

WORK="$(mktemp -d "${TMPDIR:-/tmp}/loopwatch-packaging.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
AWAY="$WORK/away"  # the working directory of every command: no loopwatch/ to import there
mkdir "$AWAY"
STARTED=$SECONDS

say() { printf 'packaging [%3ds] %s\n' $((SECONDS - STARTED)) "$*"; }
fail() {
    printf 'packaging: FAILED: %s\n' "$*" >&2
    exit 1
}
only() {  # the one file a glob names
    [ $# -eq 1 ] && [ -f "$1" ] || fail "expected one file, found: $*"
    printf '%s' "$1"
}
logged() {  # LOG COMMAND...: run it, its output in LOG, shown if it fails
    local log="$1"
    shift
    if ! "$@" >"$log" 2>&1; then
        tail -n 60 "$log" >&2
        fail "$* (log above)"
    fi
}

# a fresh environment without pip: make setup's pip installs into it (--python), with its cache
fresh() {
    "$DEV/python" -m venv --without-pip "$WORK/$1"
}
install() {  # NAME PATH ARGS...: pip install ARGS into NAME's environment, with that PATH
    local name="$1" path="$2"
    shift 2
    logged "$WORK/$name.pip.log" env -u CC -u CXX -u LDSHARED PATH="$path" \
        "$DEV/python" -m pip --python "$WORK/$name/bin/python" install --no-input "$@"
}

away() { (cd "$AWAY" && "$@"); }
demo_json() {  # OUT COMMAND...: the command's `demo --json` (the demo's summary) into OUT
    local out="$1"
    shift
    "$@" demo --json >"$out" 2>"$out.err" || {
        cat "$out.err" >&2
        fail "$* demo --json"
    }
}
# what the demo gives on the checkout's own code (python -m from the checkout: its loopwatch/)
EXPECTED_DEMO="$WORK/demo.expected.json"
(cd "$ROOT" && demo_json "$EXPECTED_DEMO" "$DEV/python" -m loopwatch)

runs() {  # NAME CORE: the installed command, from outside the checkout
    local name="$1" core="$2" bin="$WORK/$1/bin" version said
    case "$core" in
    compiled) said="(compiled core)" ;;
    pure) said="(pure Python core)" ;;
    esac
    version="$(away "$bin/loopwatch" --version)"
    say "$name: $version"
    [[ "$version" == "loopwatch "*" $said" ]] || fail "$name: --version does not say $said"
    away "$bin/python" -P "$HERE/installed.py" "$core" || fail "$name: not the installed $core core"
    logged "$WORK/$name.conformance.log" away "$bin/loopwatch" conformance "${VECTORS[@]}"
    local verdict
    verdict="$(tail -n 1 "$WORK/$name.conformance.log")"
    [[ "$verdict" =~ ^[1-9][0-9]*\ passed,\ 0\ failed$ ]] || fail "$name: conformance: $verdict"
    logged "$WORK/$name.demo.log" away "$bin/loopwatch" demo
    away demo_json "$WORK/$name.demo.json" "$bin/loopwatch"
    cmp -s "$EXPECTED_DEMO" "$WORK/$name.demo.json" || fail "$name: loopwatch demo --json differs from the checkout's"
    say "$name: conformance $verdict; demo ran, its summary is the checkout's"
}

pure_tests() {  # the checkout's unit and property tests, importing the installed pure core
    local bin="$WORK/pure/bin" tools
    # pytest, hypothesis and what the unit tests import (OTLP, rocksdict, jsonschema), as dev pins them
    tools="$("$DEV/python" -c '
import re, sys, tomllib
with open(sys.argv[1], "rb") as f:
    dev = tomllib.load(f)["project"]["optional-dependencies"]["dev"]
wanted = re.compile(r"(pytest|hypothesis|opentelemetry-[a-z-]+|rocksdict|jsonschema)\s*([<>=!~;].*)?$")
print("\n".join(d for d in dev if wanted.match(d)))' "$ROOT/pyproject.toml")"
    mapfile -t tools <<<"$tools"
    install pure "$PATH" "${tools[@]}"
    say "pure: unit and property tests on the installed core (${#tools[@]} test packages added)"
    local ignored=()
    for test in "${C_TESTS[@]}"; do ignored+=("--ignore=$test"); done
    # In every Python process of the environment (a test's children too), `import loopwatch` never
    # finds the checkout's loopwatch/ (pytest puts the checkout first on sys.path, a test may run
    # `python -m loopwatch` in it): checkout_guard.py, from a .pth file. installed.py (-p) checks
    # it, and that every loopwatch module the tests loaded came from the environment.
    local site
    site="$("$bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    cp "$HERE/checkout_guard.py" "$site/loopwatch_checkout_guard.py"
    printf 'import loopwatch_checkout_guard; loopwatch_checkout_guard.install(%s)\n' \
        "$("$DEV/python" -c 'import sys; print(repr(sys.argv[1]))' "$ROOT")" >"$site/loopwatch-checkout-guard.pth"
    local found  # a child in the checkout, with an environment of its own, imports the installed one
    found="$(cd "$ROOT" && env -i PATH=/usr/bin:/bin "$bin/python" -c 'import loopwatch; print(loopwatch.__file__)')"
    [[ "$found" == "$site/loopwatch/__init__.py" ]] || fail "pure: import loopwatch in the checkout gives $found"
    (cd "$ROOT" && env LOOPWATCH_PURE_PYTHON=1 LOOPWATCH_TEST_INSTALLED_CORE=pure PYTHONPATH="$HERE" \
        PATH="$bin:$PATH" "$bin/python" -m pytest -p installed -p no:cacheprovider -q \
        "${ignored[@]}" tests/unit tests/property) ||
        fail "pure: the unit and property tests on the installed pure core"
}

for check in "$@"; do
    case "$check" in
    compiled)
        sdist="$(only "$DIST"/loopwatch-*.tar.gz)"
        say "compiled: $(basename "$sdist") into a fresh environment, with a C compiler"
        fresh compiled
        install compiled "$PATH" "$sdist"
        runs compiled compiled
        ;;
    pure)
        sdist="$(only "$DIST"/loopwatch-*.tar.gz)"
        nocc="$WORK/pure/bin"  # the environment's own scripts, and nothing else: no cc, gcc or clang
        fresh pure
        if env PATH="$nocc" "$BASH" -c 'command -v cc || command -v gcc || command -v clang' >/dev/null; then
            fail "pure: a C compiler on PATH=$nocc"
        fi
        say "pure: $(basename "$sdist") into a fresh environment, no C compiler on the PATH"
        install pure "$nocc" "$sdist"
        runs pure pure
        pure_tests
        ;;
    wheel)
        wheel="$(only "$DIST"/loopwatch-*.whl)"
        say "wheel: $(basename "$wheel") into a fresh environment"
        fresh wheel
        install wheel "$PATH" "$wheel"
        runs wheel compiled
        ;;
    *) fail "unknown check $check: compiled, pure or wheel" ;;
    esac
done
say "passed: $*"
