"""Build hook: the detector core compiled to C with mypyc (the metadata is in pyproject.toml).

The modules of ``COMPILED`` (the core's and every rule module of the registry:
``detectors/core_build.py``) are plain, type-checked Python; mypyc turns them into extension modules
that run the step, with the hand-written C modules, about 3x faster than the interpreted
code without them (``make bench`` times both side by side). Set
``LOOPWATCH_PURE_PYTHON=1`` (or build where mypyc or a C compiler is missing) to install the
same code uncompiled: behaviour is identical, only slower. Modules that define msgspec
Structs or ``str`` subclasses stay interpreted. The few hand-written C modules (``NATIVE``)
are built with them; each has a Python twin that takes its place where it was not built.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path
from types import ModuleType

from setuptools import Extension, setup

HERE = Path(__file__).resolve().parent


def _core_build() -> ModuleType:
    """detectors/core_build.py, loaded from its file (the package cannot be imported yet; a
    source distribution has it under loopwatch/ only)."""
    spec = importlib.util.spec_from_file_location(
        "_loopwatch_core_build", HERE / "loopwatch" / "detectors" / "core_build.py"
    )
    if spec is None or spec.loader is None:
        raise ImportError("detectors/core_build.py cannot be loaded")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: the core's modules and every rule module the registry imports (detectors/core_build.py)
COMPILED: list[str] = _core_build().compiled_modules()

#: Hand-written C modules (each has a pure-Python twin that is used where it was not built).
NATIVE = [
    ("detectors._json_scan", "detectors/_json_scan.c"),
    ("detectors._raw_json", "detectors/_raw_json.c"),
    ("detectors._stable_bytes", "detectors/_stable_bytes.c"),
]


#: setup.py commands that only write metadata or the source distribution (MANIFEST.in lists the C
#: sources and headers): mypyc is not run for them, only for a build
METADATA_ONLY = {"egg_info", "dist_info", "sdist"}
BUILDS = {"build", "build_ext", "bdist", "bdist_wheel", "bdist_egg", "editable_wheel", "develop", "install"}


def builds_extensions(argv: list[str]) -> bool:
    """Whether the setup.py command line ``argv`` builds (metadata and sdist commands do not)."""
    words = {word for word in argv[1:] if not word.startswith("-")}
    return not words & METADATA_ONLY or bool(words & BUILDS)


def extensions() -> list[object]:
    if os.environ.get("LOOPWATCH_PURE_PYTHON"):
        return []
    if not builds_extensions(sys.argv):
        return []
    if not shutil.which(os.environ.get("CC", "cc")) and not shutil.which("gcc"):
        print("loopwatch: no C compiler; installing the pure-Python core", file=sys.stderr)
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        print("loopwatch: mypyc not available; installing the pure-Python core", file=sys.stderr)
        return []
    # compiled under their import names (loopwatch.detectors.engine): through the links in loopwatch/
    compiled = list(mypycify([f"loopwatch/{path}" for path in COMPILED], opt_level="3"))
    return [*compiled, *(Extension(f"loopwatch.{name}", [f"loopwatch/{source}"]) for name, source in NATIVE)]


setup(ext_modules=extensions())
