"""Guards nobody reviews: the pure core imports nothing of the I/O stack; exports are complete."""

import importlib
import subprocess
import sys

import pytest


def test_core_imports_no_io_libraries() -> None:
    code = (
        "import sys, config, detectors.step, detectors.facade, detectors.conformance, detectors.engine;"
        "bad = [m for m in ('faust', 'aiokafka', 'redis', 'mode', 'structlog') if m in sys.modules];"
        "print(','.join(bad))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True, text=True)
    assert done.stdout.strip() == ""


@pytest.mark.parametrize(
    "module",
    ["config", "detectors.events", "detectors.stable_json", "detectors.outcomes", "detectors.step"],
)
def test_all_names_exist(module: str) -> None:
    mod = importlib.import_module(module)
    for name in mod.__all__:
        assert hasattr(mod, name), f"{module}.__all__ names missing {name}"
