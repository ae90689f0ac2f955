"""Which modules mypyc compiles (:func:`compiled_modules`, setup.py's list), and which core
this installation runs (``loopwatch --version`` says it): the compiled one (those modules and
the hand-written C modules of setup.py's ``NATIVE``), or the same code interpreted, as an
install built without a C compiler or mypyc has it. A module counts as it would be imported
now: one already imported as it was.

The compiled modules are the core's (:data:`CORE_MODULES`) and every rule module the registry
(``detectors/rules/registry.py``) imports: adding a rule to the registry compiles it. setup.py
loads this module from its file, before anything of loopwatch can be imported, so it reads the
registry's source rather than importing it; it imports nothing but the standard library.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

__all__ = ["CORE_MODULES", "NATIVE_MODULES", "compiled_modules", "core_build", "rule_modules"]

#: the modules mypyc compiles beside the registry's rule modules (paths from the repository's
#: root); each plain typed Python, no msgspec Struct or str subclass defined in it
CORE_MODULES = (
    "config/fleet.py",
    "config/loop_detection.py",
    "config/own_rules.py",
    "detectors/decoding.py",
    "detectors/detection.py",
    "detectors/engine.py",
    "detectors/event_fields.py",
    "detectors/exec_failures.py",
    "detectors/escalation.py",
    "detectors/hashing.py",
    "detectors/history.py",
    "detectors/input_limits.py",
    "detectors/outcome_signature.py",
    "detectors/outcomes.py",
    "detectors/rule_state.py",
    "detectors/run_engine.py",
    "detectors/rules/base.py",
    "detectors/rules/registry.py",
    "detectors/stable_json.py",
    "detectors/tombstone.py",
    "detectors/verdicts.py",
    "detectors/state.py",
    "detectors/step.py",
    "detectors/warning_buckets.py",
)
#: where the registry imports its rules from
RULES_PACKAGE = "loopwatch.detectors.rules"
REGISTRY = Path(__file__).resolve().parent / "rules" / "registry.py"

#: a module of the step that mypyc compiles wherever it compiles the core
PROBE = "loopwatch.detectors.step"
#: the hand-written C modules (each with a Python twin used where it was not built)
NATIVE_MODULES = (
    "loopwatch.detectors._json_scan",
    "loopwatch.detectors._raw_json",
    "loopwatch.detectors._stable_bytes",
)


def _compiled(name: str) -> bool:
    spec = importlib.util.find_spec(name)
    return spec is not None and spec.origin is not None and not spec.origin.endswith(".py")


def core_build() -> str:
    """``compiled core`` (mypyc and every C module), ``pure Python core`` (neither), or what
    a partial build holds."""
    mypyc = _compiled(PROBE)
    native = [name.rpartition(".")[2] for name in NATIVE_MODULES if importlib.util.find_spec(name)]
    if mypyc and len(native) == len(NATIVE_MODULES):
        return "compiled core"
    if not mypyc and not native:
        return "pure Python core"
    return f"partly compiled core (mypyc: {'yes' if mypyc else 'no'}; C: {', '.join(native) or 'none'})"


def rule_modules(registry: str | None = None) -> list[str]:
    """The modules of the rules the registry imports (``from loopwatch.detectors.rules import
    ...``), as paths from the repository's root; ``registry``: the registry's source (its file's
    by default)."""
    source = REGISTRY.read_text(encoding="utf-8") if registry is None else registry
    names = {
        alias.name
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ImportFrom) and node.module == RULES_PACKAGE and node.level == 0
        for alias in node.names
    }
    return sorted(f"detectors/rules/{name}.py" for name in names - {"base"})


def compiled_modules(registry: str | None = None) -> list[str]:
    """What mypyc compiles (setup.py): the core's modules and the registry's rule modules."""
    return sorted({*CORE_MODULES, *rule_modules(registry)})
