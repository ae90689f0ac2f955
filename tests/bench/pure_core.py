"""The healthy workload's µs per call on the *pure-Python* core, in this process.

``python -m tests.bench.pure_core`` imports ``config`` and ``detectors`` from their ``.py``
sources even where mypyc's compiled modules sit beside them, so ``make bench`` can time the
compiled and the interpreted core side by side on the same machine, in the same run.
"""

from __future__ import annotations

import importlib.machinery
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

PURE_PACKAGES = ("config", "detectors")


class SourceOnlyFinder:
    """Finds ``config.*`` and ``detectors.*`` as source files, never as extension modules."""

    @classmethod
    def find_spec(
        cls, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if name.split(".")[0] not in PURE_PACKAGES:
            return None
        loader = (importlib.machinery.SourceFileLoader, importlib.machinery.SOURCE_SUFFIXES)
        for entry in path if path is not None else sys.path:
            spec = importlib.machinery.FileFinder(entry or ".", loader).find_spec(name)
            if spec is not None:
                return spec
        return None


def main() -> int:
    sys.meta_path.insert(0, SourceOnlyFinder)
    import detectors.step
    from tests.bench.core_bench import time_healthy

    if not str(detectors.step.__file__).endswith(".py"):
        raise SystemExit(f"the compiled core was imported: {detectors.step.__file__}")
    print(f"{time_healthy() * 1e6:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
