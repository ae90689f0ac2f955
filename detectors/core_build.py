"""Which core this installation runs (``loopwatch --version`` says it): the compiled one
(mypyc's modules of ``setup.py``'s ``COMPILED`` and the hand-written C modules of its
``NATIVE``), or the same code interpreted, as an install built without a C compiler or
mypyc has it. A module counts as it would be imported now: one already imported as it was."""

from __future__ import annotations

import importlib.util

__all__ = ["NATIVE_MODULES", "core_build"]

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
