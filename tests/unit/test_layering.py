"""Guards nobody reviews: the pure core imports nothing of the I/O stack; exports are complete."""

import importlib
import subprocess
import sys
from pathlib import Path

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


def _imports(path: Path) -> list[str]:
    """The ``loopwatch.*`` modules a source file imports (at any depth in the file)."""
    import ast

    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return [name for name in names if name.startswith("loopwatch.")]


# room -> the rooms it may import from: config <- detectors <- streams, never back
ALLOWED = {
    "config": {"config"},
    "detectors": {"config", "detectors"},
    "streams": {"config", "detectors", "streams"},
}


def test_imports_follow_the_direction_config_detectors_streams() -> None:

    root = Path(__file__).resolve().parents[2]
    wrong = []
    checked = 0
    for room, allowed in ALLOWED.items():
        for path in sorted((root / room).rglob("*.py")):
            checked += 1
            for name in _imports(path):
                target = name.split(".")[1]
                if target not in allowed:
                    wrong.append(f"{path.relative_to(root)} imports {name}")
    assert checked > 100
    assert any(p.parts[-2] == "fleet" for p in (root / "detectors").rglob("*.py"))  # detectors.fleet is in
    assert wrong == []


def test_no_shell_imports_the_cli_and_no_product_code_imports_tests() -> None:

    root = Path(__file__).resolve().parents[2]
    wrong = []
    for room in ("config", "detectors", "streams"):
        for path in sorted((root / room).rglob("*.py")):
            text = path.read_text()
            if "from tests" in text or "import tests" in text:
                wrong.append(f"{path.relative_to(root)} imports tests")
            if "cli" not in path.parts:
                wrong += [
                    f"{path.relative_to(root)} imports {name}"
                    for name in _imports(path)
                    if name == "loopwatch.streams.cli" or name.startswith("loopwatch.streams.cli.")
                ]
    assert wrong == []
