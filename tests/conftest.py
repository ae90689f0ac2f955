"""Suite-wide settings: no per-example deadline (CI machines are slow and noisy), and no run
against a compiled core older than its sources (mypyc builds it; ``make`` rebuilds it)."""

from __future__ import annotations

import importlib.machinery
import os
from pathlib import Path

import pytest
from hypothesis import settings

settings.register_profile("loopwatch", deadline=None, print_blob=True)
settings.load_profile("loopwatch")

ROOT = Path(__file__).resolve().parent.parent

if os.environ.get("LOOPWATCH_PURE_PYTHON"):  # the interpreted core, as installed without a compiler
    from tests.pure_python import use_sources

    use_sources()

# the rules' config sections are handed to config by their registry, as every shell has it
import loopwatch.detectors.rules.registry  # noqa: E402, F401


def stale_compiled_modules() -> list[str]:
    """Sources edited after their compiled module was built (Python would import the old one)."""
    stale = []
    for package in ("config", "detectors"):
        for source in (ROOT / package).rglob("*.py"):
            for suffix in importlib.machinery.EXTENSION_SUFFIXES:
                built = source.with_name(source.stem + suffix)
                if built.exists() and built.stat().st_mtime < source.stat().st_mtime:
                    stale.append(str(source.relative_to(ROOT)))
    return stale


def pytest_sessionstart(session: pytest.Session) -> None:
    stale = [] if os.environ.get("LOOPWATCH_PURE_PYTHON") else stale_compiled_modules()
    if stale:
        pytest.exit(
            f"the compiled core is older than {', '.join(stale)}: run `make setup` (or "
            "`pip install --no-build-isolation -e .`) to rebuild it",
            returncode=2,
        )
