"""Import ``loopwatch.config`` and ``loopwatch.detectors`` from their sources even where mypyc's
compiled modules sit beside them: the test session does so with ``LOOPWATCH_PURE_PYTHON=1`` (the same code as
an install without a compiler), and ``make bench`` to time both cores side by side."""

from __future__ import annotations

import importlib.machinery
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

__all__ = ["SourceOnlyFinder", "use_sources"]

PURE_PACKAGES = ("loopwatch.config", "loopwatch.detectors")


class SourceOnlyFinder:
    """Finds ``loopwatch.config.*`` and ``loopwatch.detectors.*`` as source files, never compiled."""

    @classmethod
    def find_spec(
        cls, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if ".".join(name.split(".")[:2]) not in PURE_PACKAGES:
            return None
        loader = (importlib.machinery.SourceFileLoader, importlib.machinery.SOURCE_SUFFIXES)
        for entry in path if path is not None else sys.path:
            spec = importlib.machinery.FileFinder(entry or ".", loader).find_spec(name)
            if spec is not None:
                return spec
        return None


def use_sources() -> None:
    """From now on, ``loopwatch.config.*`` and ``loopwatch.detectors.*`` are imported from source."""
    if SourceOnlyFinder not in sys.meta_path:
        sys.meta_path.insert(0, SourceOnlyFinder)
