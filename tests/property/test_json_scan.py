"""The C scans of JSON bytes (``detectors/_json_scan.c``) answer as their Python twins do.

The C module is loaded from its built file, even in the sources-only session
(``LOOPWATCH_PURE_PYTHON=1``), where the core otherwise runs the Python twins: ``make setup``
builds it, so its absence fails here instead of leaving the fast path untested.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
from types import ModuleType

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from loopwatch.detectors.json_scan import python_javascript_safe, python_opening_brackets
from tests.helpers import ROOT


def _built_module() -> ModuleType:
    name = "loopwatch.detectors._json_scan"
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = ROOT / "detectors" / f"_json_scan{suffix}"
        if path.exists():
            spec = importlib.util.spec_from_file_location(name, path)
            assert spec is not None
            assert spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
    raise AssertionError("detectors/_json_scan.c is not built: run `make setup`")


NATIVE = _built_module()

# bytes the scans care about (digits, brackets, the UTF-8 lead bytes around 0xEE) and some others
_INTERESTING = st.sampled_from(b'0123456789[{]}":, aZ\x00\x7f\x80\xed\xee\xef\xff')
_BYTES = st.one_of(
    st.binary(max_size=80),
    st.lists(_INTERESTING, max_size=80).map(bytes),
    st.lists(st.sampled_from(b"0123456789x"), max_size=80).map(bytes),  # long and short digit runs
)


@given(_BYTES)
@example(b"1" * 15 + b"x" + b"1" * 15)
@example(b"1" * 16)
@example(b"x" * 7 + b"1" * 16)  # a run across two 8-byte words
@example(b"\xee")
@example(b"\xed" * 9)
@example(b"")
def test_javascript_safe_matches_python(data: bytes) -> None:
    assert NATIVE.javascript_safe(data) is python_javascript_safe(data)


@given(_BYTES)
@example(b"[{" * 70)
@example(b"")
def test_opening_brackets_matches_python(data: bytes) -> None:
    assert NATIVE.opening_brackets(data) == python_opening_brackets(data)


@pytest.mark.parametrize("scan", ["javascript_safe", "opening_brackets"])
def test_the_scans_refuse_what_is_not_bytes(scan: str) -> None:
    with pytest.raises(TypeError, match="takes bytes, not str"):
        getattr(NATIVE, scan)("[{")
