# loopwatch — developer commands. `make help` lists them.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
BASE   := $(VENV)/.base-stamp
STAMP  := $(VENV)/.installed-stamp
# The detector core is compiled with mypyc (setup.py, the module list in detectors/core_build.py);
# rebuilt when one of its sources (or anything they may import from config/) changes.
CORE   := $(wildcard detectors/*.py detectors/*/*.py config/*.py detectors/*.c) setup.py
BUILT  := $(VENV)/.compiled-stamp
DEV    := $(BUILT) $(STAMP)
# editable as a path (.pth) to this checkout, whose loopwatch/ links to the source folders:
# setuptools' default editable finder costs every Python process of .venv ~10 ms at start-up
# (a hook command is one, twice per tool call: make bench-hooks)
EDITABLE := --config-settings editable_mode=compat -e

.DEFAULT_GOAL := help
.PHONY: help setup demo test test-plan lint typecheck conformance check-alerts unit unit-pure dist packaging services-up services-down bench bench-quality bench-gateway bench-stream bench-scale soak chaos clean

KAFKA_TEST := 127.0.0.1:19092
REDIS_TEST := redis://127.0.0.1:16379/0
export LOOPWATCH_TEST_KAFKA ?= $(KAFKA_TEST)
export LOOPWATCH_TEST_REDIS ?= $(REDIS_TEST)

help:  ## list the targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

# .venv in two layers: what loopwatch runs on (make demo needs only this), then the dev tools
# and the pinned runtimes the tests drive (every target that tests, checks or benchmarks)
$(BASE): pyproject.toml setup.py
	@echo "== installing loopwatch into $(VENV): its dependencies, then its core compiled with mypyc (1-4 minutes)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip 'setuptools>=77' wheel
	$(BIN)/pip install -q $(EDITABLE) .
	@touch $(BASE) $(BUILT)
	@echo "== installed: loopwatch $$($(BIN)/python -c 'import importlib.metadata as m; print(m.version("loopwatch"))'), $$(du -sh $(VENV) | cut -f1) in $(VENV)"

$(STAMP): $(BASE) pyproject.toml
	@echo "== installing the dev tools and the pinned agent runtimes the tests drive (a few minutes)"
	$(BIN)/python -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["dev"]))' > $(VENV)/dev-requirements.txt
	$(BIN)/pip install -q -r $(VENV)/dev-requirements.txt
	@touch $(STAMP)

# rebuilt only when a core source is newer than the last build: a fresh .venv was built just now
# (with the dev tools' mypy where they are installed, else in pip's isolated build environment)
$(BUILT): $(BASE) $(CORE)
	@if [ -f $(BUILT) ] && [ -z "$$(find $(CORE) setup.py -newer $(BUILT) 2>/dev/null)" ]; then :; \
	elif $(BIN)/python -c 'import mypy' 2>/dev/null; then $(BIN)/pip install -q --no-deps --no-build-isolation $(EDITABLE) . ; \
	else $(BIN)/pip install -q --no-deps $(EDITABLE) . ; fi
	@touch $(BUILT)

setup: $(BUILT) $(STAMP)  ## create .venv and install loopwatch (core compiled) with its dev tools

demo: $(BUILT)  ## run the embedded default (no broker)
	$(BIN)/loopwatch demo

lint: $(STAMP)  ## ruff lint and format check
	@echo "== lint: ruff check and format (under a minute)"
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)  ## mypy strict
	@echo "== typecheck: mypy --strict (about a minute)"
	$(BIN)/mypy

check-alerts:  ## promtool check and unit tests of docker/prometheus/alerts.yml (promtool from Debian)
	@echo "== check-alerts: promtool on the Prometheus alerts (seconds)"
	docker/prometheus/check.sh

.PHONY: docs
DOCS_PACKAGES := 'mkdocs>=1.6,<2' 'mkdocs-material>=9.5,<10'
docs: $(STAMP)  ## the docs site (MkDocs, Material theme) into .bench/site, strict: a broken link fails
	@echo "== docs: mkdocs build --strict (seconds)"
	$(BIN)/pip install -q $(DOCS_PACKAGES)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict -d .bench/site  # not -q: it hides the warnings strict counts

conformance: $(BUILT)  ## the public OpenClaw conformance vectors, and loopwatch's own (batch admission)
	@echo "== conformance: the spec's executable vectors (seconds)"
	$(BIN)/loopwatch conformance tests/data/openclaw-public.jsonl tests/data/openclaw-newest.jsonl \
		tests/data/loopwatch-batch.jsonl

services-up: $(STAMP)  ## start the local Kafka broker and Redis (what is not running yet)
	docker/services.sh up

services-down:  ## stop what services-up started
	docker/services.sh down

unit: $(DEV)  ## the pytest suite (starts Kafka and Redis for the integration tests, stops them after)
	@echo "== unit: the pytest suite, unit, property, integration, faults and the real runtimes (about 25 minutes)"
	docker/services.sh up
	$(BIN)/pytest; status=$$?; docker/services.sh down; exit $$status

unit-pure: $(DEV)  ## the unit and property tests on the pure-Python core: the sdist installed without a C compiler
	rm -f dist/loopwatch-*.tar.gz
	$(BIN)/python -m build --sdist --outdir dist . > /dev/null
	tests/packaging/check.sh dist pure

dist: $(STAMP)  ## the sdist and the wheel (built from it, core compiled) into dist/
	rm -rf dist
	@mkdir -p build
	$(BIN)/python -m build --outdir dist . > build/dist.log 2>&1 || { tail -n 40 build/dist.log; exit 1; }
	@ls dist

packaging: dist $(DEV)  ## the sdist (with a C compiler, and with none: then the unit and property tests on it) and the wheel, each installed in a fresh venv and run
	@echo "== packaging: sdist and wheel in fresh environments, the pure core's tests (about 7 minutes)"
	tests/packaging/check.sh dist

.PHONY: suites
suites: dist $(DEV)  ## the pytest suite and the packages in two lanes at once, on one broker and one Redis (tests/lanes.sh)
	@echo "== suites: the pytest suite and the packages, two lanes side by side (about 20 minutes on a quiet machine)"
	docker/services.sh up
	tests/lanes.sh dist; status=$$?; docker/services.sh down; exit $$status

test: test-plan lint typecheck docs conformance check-alerts suites  ## everything CI runs

test-plan:
	@echo "make test: lint, typecheck, docs, conformance, check-alerts, then the suites (Kafka and Redis started and"
	@echo "stopped): the broker's integration tests then the packages, beside every other test; about 25 minutes on a"
	@echo "quiet 2-core machine (the first run also builds .venv and installs the runtimes)"

bench: $(DEV)  ## benchmark the core on the four workloads
	$(BIN)/python -m tests.bench.core_bench

bench-quality: $(DEV)  ## loops stopped on real agents' runs: OpenClaw's rules, the agents preset, the shipped peers (docs/real-loops.md)
	$(BIN)/python -m tests.bench.quality.quality_bench $(QUALITY_ARGS)

bench-gateway: $(DEV)  ## /v1/decide round trips and latency on loopwatch gateway (embedded and Kafka)
	docker/services.sh up kafka
	$(BIN)/python -m tests.bench.gateway_bench; status=$$?; docker/services.sh down; exit $$status

.PHONY: bench-facade
bench-facade: $(DEV)  ## LoopDetector on Python values (the in-process adapters' path), with and without _stable_bytes.c
	$(BIN)/python -m tests.bench.facade_bench

.PHONY: bench-hooks
HOOKS_ARGS ?=
bench-hooks: $(DEV)  ## each hook command's whole process against the bare interpreter, gateway up and down (HOOKS_ARGS=--rounds N --turns N)
	$(BIN)/python -m tests.bench.hooks_bench $(HOOKS_ARGS)

bench-stream: $(DEV)  ## worker throughput and latency on the local broker (vs. raw aiokafka)
	docker/services.sh up kafka
	$(BIN)/python -m tests.bench.stream_bench; status=$$?; docker/services.sh down; exit $$status

.PHONY: bench-mcp
MCP_BENCH_ARGS ?=
bench-mcp: $(DEV)  ## tools/call round trips through loopwatch mcp vs direct (MCP SDK client, server-everything from npm; MCP_BENCH_ARGS=--http ...)
	$(BIN)/python -m tests.bench.mcp_bench $(MCP_BENCH_ARGS)

SCALE_ARGS ?=
bench-scale: $(DEV)  ## memory per run, failover time, CPU per event at 10k-1M runs (SCALE_ARGS=..., see tests/bench/scale_bench.py)
	docker/services.sh up
	$(BIN)/python -m tests.bench.scale_bench $(SCALE_ARGS); status=$$?; docker/services.sh down; exit $$status

CHAOS_REPEAT ?= 10
chaos: $(DEV)  ## every fault scenario CHAOS_REPEAT times (default 10) with fresh fleets, on the local broker
	docker/services.sh up
	$(BIN)/python -m tests.chaos --repeat $(CHAOS_REPEAT); status=$$?; docker/services.sh down; exit $$status

soak: $(DEV)  ## 10 minutes of steady load; the worker's memory over time
	docker/services.sh up
	$(BIN)/python -m tests.bench.soak; status=$$?; docker/services.sh down; exit $$status

clean:  ## remove build and benchmark artefacts
	rm -rf build dist .bench .mypy_cache .pytest_cache .ruff_cache *__mypyc*.so
	find config detectors -name '*.so' -delete
