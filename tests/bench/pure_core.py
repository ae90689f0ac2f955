"""The healthy workload's µs per call on the *pure-Python* core, in this process.

``python -m tests.bench.pure_core`` imports ``loopwatch.config`` and ``loopwatch.detectors``
from their ``.py`` sources even where mypyc's compiled modules sit beside them, so ``make bench`` can time the
compiled and the interpreted core side by side on the same machine, in the same run.
"""

from __future__ import annotations

from tests.pure_python import use_sources


def main() -> int:
    use_sources()
    import loopwatch.detectors.step
    from tests.bench.core_bench import time_healthy

    if not str(loopwatch.detectors.step.__file__).endswith(".py"):
        raise SystemExit(f"the compiled core was imported: {loopwatch.detectors.step.__file__}")
    print(f"{time_healthy() * 1e6:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
