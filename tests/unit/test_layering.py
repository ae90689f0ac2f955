"""Guards nobody reviews: the pure core imports nothing of the I/O stack; exports are complete."""

import importlib
import subprocess
import sys

import pytest


def test_core_imports_no_io_libraries() -> None:
    code = (
        "import sys, loopwatch.config, loopwatch.detectors.step, loopwatch.detectors.facade,"
        " loopwatch.detectors.conformance, loopwatch.detectors.engine;"
        "bad = [m for m in ('faust', 'aiokafka', 'redis', 'mode', 'structlog') if m in sys.modules];"
        "print(','.join(bad))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True, text=True)
    assert done.stdout.strip() == ""


@pytest.mark.parametrize(
    "module",
    [
        "loopwatch",
        "loopwatch.config",
        "loopwatch.detectors.events",
        "loopwatch.detectors.stable_json",
        "loopwatch.detectors.outcomes",
        "loopwatch.detectors.step",
        "loopwatch.streams.client",
    ],
)
def test_all_names_exist(module: str) -> None:
    mod = importlib.import_module(module)
    for name in mod.__all__:
        assert hasattr(mod, name), f"{module}.__all__ names missing {name}"
