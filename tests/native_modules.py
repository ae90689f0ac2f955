"""The hand-written C modules of the core, loaded for the tests that compare them with their
Python twins: as built by ``make setup``, and built again without SIMD (what a machine
without SSE2 runs)."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sysconfig
from pathlib import Path
from types import ModuleType

from tests.helpers import ROOT

__all__ = ["built_module", "portable_module"]


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def built_module(stem: str) -> ModuleType:
    """``detectors/<stem>.c`` as ``make setup`` built it (failing where it was not built)."""
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = ROOT / "detectors" / f"{stem}{suffix}"
        if path.exists():
            return _load(f"loopwatch.detectors.{stem}", path)
    raise AssertionError(f"detectors/{stem}.c is not built: run `make setup`")


def portable_module(stem: str, directory: Path) -> ModuleType:
    """``detectors/<stem>.c`` built with the C compiler into ``directory``, without SIMD."""
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    assert compiler is not None, "no C compiler: make setup needs one too"
    target = directory / f"{stem}{importlib.machinery.EXTENSION_SUFFIXES[0]}"
    include = sysconfig.get_paths()["include"]
    source = ROOT / "detectors" / f"{stem}.c"
    command = [compiler, "-O2", "-shared", "-fPIC", "-DLOOPWATCH_PORTABLE", f"-I{include}", str(source), "-o"]
    subprocess.run([*command, str(target)], check=True, capture_output=True)
    return _load(f"loopwatch.detectors.{stem}", target)
