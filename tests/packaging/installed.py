"""What an installed loopwatch must be, checked inside the virtual environment it was installed
into (``tests/packaging/check.sh`` makes them), away from the checkout:

- as a script, ``python -P installed.py compiled|pure``: the package comes from the
  environment's site-packages, and it is the core asked for: compiled (mypyc's modules and the
  three hand-written C modules importable) or pure (the modules are their ``.py`` sources, no C
  module, no mypyc, nothing compiled under ``loopwatch/``); ``loopwatch --version`` says which;
- as a pytest plugin (``-p installed`` with this folder on ``PYTHONPATH``, and
  ``LOOPWATCH_TEST_INSTALLED_CORE`` naming the core) when the checkout's tests run against that
  install: the same before the first test, and after the last every ``loopwatch`` module the
  tests loaded came from the environment, none from the checkout.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
import sysconfig
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (pytest is installed only where the tests run)
    import pytest

__all__ = ["problems"]

#: the checkout these files are in (its ``loopwatch/`` must never be what runs)
CHECKOUT = Path(__file__).resolve().parents[2]
NATIVE = ("_json_scan", "_raw_json", "_stable_bytes")
CORES = {"compiled": "compiled core", "pure": "pure Python core"}


def _site_packages() -> list[Path]:
    paths = sysconfig.get_paths()
    return sorted({Path(paths[key]).resolve() for key in ("purelib", "platlib")})


def _inside(path: str | None, folders: list[Path]) -> bool:
    if path is None:
        return False
    resolved = Path(path).resolve()
    return any(resolved.is_relative_to(folder) for folder in folders)


def loaded_elsewhere() -> list[str]:
    """The ``loopwatch`` modules loaded so far from anywhere but this environment's site-packages."""
    site = _site_packages()
    return sorted(
        f"{name}: {getattr(module, '__file__', None)}"
        for name, module in list(sys.modules.items())
        if (name == "loopwatch" or name.startswith("loopwatch."))
        and not _inside(getattr(module, "__file__", None), site)
    )


def problems(core: str) -> list[str]:
    """What is not as ``core`` (``compiled`` or ``pure``) says in this process; empty if all is."""
    import loopwatch.detectors.step
    from loopwatch.detectors.core_build import core_build

    site = _site_packages()
    found = [f"loaded from outside {', '.join(map(str, site))}: {where}" for where in loaded_elsewhere()]
    step = loopwatch.detectors.step.__file__
    if _inside(step, [CHECKOUT]):
        found.append(f"loopwatch.detectors.step is the checkout's: {step}")
    if (core == "pure") != (step is not None and step.endswith(".py")):
        found.append(f"loopwatch.detectors.step is {step}, not the {core} core's")
    for name in NATIVE:
        spec = importlib.util.find_spec(f"loopwatch.detectors.{name}")
        if core == "pure" and spec is not None:
            found.append(f"loopwatch.detectors.{name} is importable: {spec.origin}")
        if core == "compiled" and (spec is None or not _inside(spec.origin, site)):
            found.append(f"loopwatch.detectors.{name} is not installed: {spec and spec.origin}")
    if core == "pure":
        if importlib.util.find_spec("mypyc") is not None:
            found.append("mypyc is installed")
        package = Path(loopwatch.__path__[0])
        suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
        built = [str(p) for folder in site for p in folder.iterdir() if "__mypyc" in p.name]
        built += [str(p) for p in package.rglob("*") if p.name.endswith(suffixes)]
        found += [f"compiled module installed: {path}" for path in built]
    if core_build() != CORES[core]:
        found.append(f"the core says it is the {core_build()}, not the {CORES[core]}")
    return found


def _core() -> str:
    core = os.environ.get("LOOPWATCH_TEST_INSTALLED_CORE", "")
    assert core in CORES, f"LOOPWATCH_TEST_INSTALLED_CORE={core!r}: compiled or pure"
    return core


def pytest_sessionstart(session: pytest.Session) -> None:
    """Before the first test: the installed core, guarded against the checkout in every process."""
    import pytest

    found = problems(_core())
    if not any(type(finder).__name__ == "CheckoutGuard" for finder in sys.meta_path):
        found.append("no CheckoutGuard (checkout_guard.py): a test's child could import the checkout")
    if found:
        pytest.exit("not the installed package:\n  " + "\n  ".join(found), returncode=3)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """After the last test: every ``loopwatch`` module the tests loaded was the installed one."""
    import pytest

    found = problems(_core())
    if found:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line("not the installed package:\n  " + "\n  ".join(found), red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    else:
        print(f"\nthe tests ran on the installed {CORES[_core()]} ({loaded()} loopwatch modules)")


def loaded() -> int:
    return sum(1 for name in sys.modules if name == "loopwatch" or name.startswith("loopwatch."))


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in CORES:
        print("usage: python -P installed.py compiled|pure", file=sys.stderr)
        return 2
    found = problems(argv[0])
    for problem in found:
        print(f"installed.py: {problem}", file=sys.stderr)
    if not found:
        print(f"installed: the {CORES[argv[0]]}, from {_site_packages()[0]}")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
