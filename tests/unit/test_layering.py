"""Guards nobody reviews: the pure core imports nothing of the I/O stack; exports are complete;
imports go one way (config <- detectors <- streams <- integrations), in every form, with no circles."""

import ast
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


ROOT = Path(__file__).resolve().parents[2]
#: the rooms of the package (top-level folders linked into ``loopwatch``)
ROOMS = ("config", "detectors", "streams", "integrations")


def _module_of(path: Path, root: Path) -> tuple[str, bool]:
    """The dotted module a source file is, and whether it is a package's ``__init__``."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    package = parts[-1] == "__init__"
    if package:
        parts.pop()
    return ".".join(["loopwatch", *parts]), package


def _type_checking(node: ast.AST) -> bool:
    """``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``): imports there never run."""
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(source: str, module: str, package: bool) -> set[str]:
    """Every ``loopwatch`` module a source imports when it runs, at any depth (inside
    functions too): ``import a.b``, ``from a import b`` (``a`` and ``a.b``), relative imports
    (resolved against ``module``), and ``importlib.import_module`` / ``__import__`` of a string
    literal; imports under ``if TYPE_CHECKING:`` are for the type checker only and left out."""
    found: set[str] = set()
    base = module.split(".") if package else module.split(".")[:-1]

    def visit(node: ast.AST) -> None:
        if _type_checking(node):
            assert isinstance(node, ast.If)
            for statement in node.orelse:
                visit(statement)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                target = ".".join([*anchor, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names if alias.name != "*")
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            name = (
                func.attr
                if isinstance(func, ast.Attribute)
                else func.id
                if isinstance(func, ast.Name)
                else ""
            )
            if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                found.add(node.args[0].value)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(source))
    return {name for name in found if name == "loopwatch" or name.startswith("loopwatch.")}


def _modules(root: Path = ROOT) -> dict[str, set[str]]:
    """Every module of the rooms and the loopwatch modules it imports (that exist)."""
    files = {path: _module_of(path, root) for room in ROOMS for path in sorted((root / room).rglob("*.py"))}
    known = {module for module, _ in files.values()} | {"loopwatch"}
    graph: dict[str, set[str]] = {}
    for path, (module, package) in files.items():
        names = imports_of(path.read_text(), module, package)
        graph[module] = {name for name in names if name in known and name != module}
    return graph


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


# room -> the rooms it may import from: config <- detectors <- streams <- integrations, never back
ALLOWED = {
    "config": {"config"},
    "detectors": {"config", "detectors"},
    "streams": {"config", "detectors", "streams"},
    "integrations": {"config", "detectors", "streams", "integrations"},
}


def _wrong_direction(graph: dict[str, set[str]]) -> list[str]:
    wrong = []
    for module, targets in graph.items():
        allowed = ALLOWED[_room(module)]
        wrong += [f"{module} imports {target}" for target in sorted(targets) if _room(target) not in allowed]
    return wrong


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def connect(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def test_imports_follow_the_direction_config_detectors_streams_integrations() -> None:
    graph = _modules()
    assert len(graph) > 100
    assert any(".fleet." in module for module in graph if module.startswith("loopwatch.detectors"))
    assert any(module.startswith("loopwatch.integrations") for module in graph)
    assert _wrong_direction(graph) == []


def test_no_module_imports_itself_back_through_others() -> None:
    """No circles, counting imports inside functions (a circle hidden in a function is a
    circle the next import-time refactor trips over)."""
    import sys

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 5000))
    try:
        assert _circles(_modules()) == []
    finally:
        sys.setrecursionlimit(limit)


@pytest.mark.parametrize(
    ("module", "package", "source", "target"),
    [
        ("loopwatch.detectors.step", False, "from ..streams import logs", "loopwatch.streams.logs"),
        ("loopwatch.detectors.step", False, "from .. import streams", "loopwatch.streams"),
        ("loopwatch.detectors.step", False, "from loopwatch import streams", "loopwatch.streams"),
        ("loopwatch.detectors.step", False, "import loopwatch.streams.logs", "loopwatch.streams.logs"),
        (
            "loopwatch.detectors.step",
            False,
            "import importlib\nimportlib.import_module('loopwatch.streams.logs')",
            "loopwatch.streams.logs",
        ),
        ("loopwatch.detectors.step", False, "__import__('loopwatch.streams')", "loopwatch.streams"),
        (
            "loopwatch.detectors.step",
            False,
            "def f():\n    from loopwatch.streams import logs",
            "loopwatch.streams",
        ),
        ("loopwatch.detectors.fleet", True, "from ...streams import logs", "loopwatch.streams.logs"),
        (
            "loopwatch.config.fleet",
            False,
            "from loopwatch.integrations import langchain",
            "loopwatch.integrations",
        ),
    ],
)
def test_every_import_form_against_the_direction_is_caught(
    module: str, package: bool, source: str, target: str
) -> None:
    found = imports_of(source, module, package)
    assert target in found
    graph = {module: {target}}
    assert _wrong_direction(graph) == [f"{module} imports {target}"]


def test_a_type_checking_import_is_not_a_runtime_import_and_a_circle_is_found() -> None:
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from loopwatch.streams import logs\n"
    assert imports_of(source, "loopwatch.detectors.step", False) == set()
    graph = {"loopwatch.a": {"loopwatch.b"}, "loopwatch.b": {"loopwatch.c"}, "loopwatch.c": {"loopwatch.a"}}
    assert _circles(graph) == [["loopwatch.a", "loopwatch.b", "loopwatch.c"]]
    assert _circles({"loopwatch.a": {"loopwatch.b"}, "loopwatch.b": set()}) == []


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
                    for name in imports_of(path.read_text(), *_module_of(path, root))
                    if name == "loopwatch.streams.cli" or name.startswith("loopwatch.streams.cli.")
                ]
    assert wrong == []
