# loopwatch — developer commands. `make help` lists them.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.DEFAULT_GOAL := help
.PHONY: help setup demo test lint typecheck conformance unit bench clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	@touch $(STAMP)

setup: $(STAMP)  ## create .venv and install loopwatch with its dev tools

demo: $(STAMP)  ## run the embedded default (no broker)
	$(BIN)/loopwatch demo

lint: $(STAMP)  ## ruff lint and format check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)  ## mypy strict
	$(BIN)/mypy

conformance: $(STAMP)  ## the public OpenClaw conformance vectors
	$(BIN)/loopwatch conformance tests/data/openclaw-public.jsonl

unit: $(STAMP)  ## the pytest suite
	$(BIN)/pytest

test: lint typecheck conformance unit  ## everything CI runs

bench: $(STAMP)  ## benchmark the core on the four workloads
	$(BIN)/python -m tests.bench.core_bench

clean:  ## remove build and benchmark artefacts
	rm -rf build .bench .mypy_cache .pytest_cache .ruff_cache
