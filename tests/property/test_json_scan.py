"""The hand-written C modules answer as the Python they stand in for.

* ``detectors/_json_scan.c``: the two byte scans, as their Python twins in ``json_scan.py``;
* ``detectors/_stable_bytes.c``: stableStringify, as the reference
  :func:`~detectors.stable_json.stable_stringify` (byte for byte wherever it answers, and it
  answers for every value of the kinds it claims); as built, and built without SIMD (the
  8-byte scan an ARM machine runs), compiled here.

The C modules are loaded from their built files, even in the sources-only session
(``LOOPWATCH_PURE_PYTHON=1``), where the core otherwise runs the Python: ``make setup`` builds
them, so their absence fails here instead of leaving the fast path untested.
"""

from __future__ import annotations

import platform
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from loopwatch.detectors.json_scan import (
    python_javascript_safe,
    python_line_scan,
    python_longest_text,
    python_opening_brackets,
)
from loopwatch.detectors.stable_json import (
    UNDEFINED,
    JSNumber,
    _number_json,
    from_python,
    stable_stringify,
)
from tests.native_modules import built_module, portable_module
from tests.property.strategies import edge_json_values, json_values

NATIVE = built_module("_json_scan")
PORTABLE_SCANS = portable_module("_json_scan", Path(tempfile.mkdtemp(prefix="loopwatch-portable-")))
ENCODER = built_module("_stable_bytes")
ENCODER.bind(JSNumber, _number_json, UNDEFINED)
PORTABLE = portable_module("_stable_bytes", Path(tempfile.mkdtemp(prefix="loopwatch-portable-")))
PORTABLE.bind(JSNumber, _number_json, UNDEFINED)
DEFAULT_SCAN = ENCODER.block_scan()


def _scans(encoder: ModuleType) -> list[str]:
    """The ASCII block scans ``encoder`` can use on this CPU."""
    usable = []
    for name in ("avx2", "sse2", "words"):
        try:
            encoder.block_scan(name)
        except ValueError:
            continue
        usable.append(name)
    encoder.block_scan(DEFAULT_SCAN if encoder is ENCODER else "words")
    return usable


SCANS = [(ENCODER, name) for name in _scans(ENCODER)] + [(PORTABLE, "words")]


def _every_scan(check: Callable[[ModuleType], None]) -> None:
    """``check`` on the built encoder with each of its block scans, and on the portable one
    (the built module is the core's too: its scan is put back whatever happens)."""
    try:
        for encoder, name in SCANS:
            encoder.block_scan(name)
            check(encoder)
    finally:
        ENCODER.block_scan(DEFAULT_SCAN)


def test_the_fastest_block_scan_is_the_default() -> None:
    if platform.machine() in ("x86_64", "AMD64"):
        fastest = "avx2" if "avx2" in _scans(ENCODER) else "sse2"
        assert fastest == DEFAULT_SCAN
        assert {"sse2", "words"} <= set(_scans(ENCODER))
    assert PORTABLE.block_scan() == "words"
    with pytest.raises(ValueError, match="sse2 is not available here"):
        PORTABLE.block_scan("sse2")


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
    for scans in (NATIVE, PORTABLE_SCANS):
        assert scans.opening_brackets(data) == python_opening_brackets(data)


@given(st.one_of(_BYTES, st.binary(min_size=15, max_size=70).map(lambda data: data * 3)))
@example(b"[{" * 70)
@example(b"[" * 4080 + b"{" * 4081 + b"\x80")  # past 255 blocks: the per-lane counts are summed
@example(b"x" * 32 + b"\x80")  # the high byte in the tail after two 16-byte blocks
@example(b"\x80" + b"x" * 31)  # and in the first block
@example(b"")
def test_line_scan_matches_python(data: bytes) -> None:
    expected = python_line_scan(data)
    assert expected == python_opening_brackets(data) * 2 + (not data.isascii())
    for scans in (NATIVE, PORTABLE_SCANS):
        assert scans.line_scan(data) == expected


# what an event's fields hold: text (ASCII, any code point), absent values, numbers, subclasses
_FIELD = st.one_of(
    st.text(max_size=300),
    st.text(alphabet="ab", min_size=120, max_size=140),
    st.none(),
    st.integers(),
    st.booleans(),
    st.builds(lambda text: type("Id", (str,), {})(text), st.text(min_size=200, max_size=210)),
)


def _answer(scan: Callable[..., int], values: tuple[Any, ...], positions: tuple[int, ...]) -> int | str:
    try:
        return scan(values, positions)
    except IndexError as exc:
        return f"IndexError: {exc}"


@given(st.lists(_FIELD, max_size=20), st.data())
@example([], None)
def test_longest_text_matches_python(values: list[Any], data: Any) -> None:
    size = len(values)
    positions = tuple(data.draw(st.lists(st.integers(-size - 2, size + 2), max_size=25))) if data else ()
    native = _answer(NATIVE.longest_text, tuple(values), positions)
    assert native == _answer(python_longest_text, tuple(values), positions)  # out of range: both refuse


def test_longest_text_refuses_what_it_cannot_read() -> None:
    with pytest.raises(IndexError, match="out of range"):
        NATIVE.longest_text(("a",), (1,))
    with pytest.raises(IndexError, match="out of range"):
        NATIVE.longest_text(("a",), (-1,))
    with pytest.raises(TypeError, match="a tuple of values and a tuple of positions"):
        NATIVE.longest_text(["a"], (0,))


@pytest.mark.parametrize("scan", ["javascript_safe", "line_scan", "opening_brackets"])
def test_the_scans_refuse_what_is_not_bytes(scan: str) -> None:
    with pytest.raises(TypeError, match="takes bytes, not str"):
        getattr(NATIVE, scan)("[{")


def _claimed(value: Any) -> bool:
    """Whether the C encoder must answer for ``value`` (see ``_stable_bytes.c``)."""
    if value is None or type(value) in (bool, JSNumber) or value is UNDEFINED:
        return True
    if type(value) is int:
        return abs(value) <= 2**53
    if type(value) is str:
        return not any(0xD800 <= ord(c) <= 0xDFFF for c in value)
    if type(value) is list:
        return all(_claimed(item) for item in value)
    if type(value) is dict:
        keys_ok = all(type(k) is str and _claimed(k) and all(ord(c) < 0x10000 for c in k) for k in value)
        return keys_ok and all(_claimed(item) for item in value.values())
    return False


_KEYS = st.text(alphabet=st.sampled_from('ab"\\\n\x01\x7f\u00e9\u0100\ue000\uffff\U0001f600'), max_size=3)
_STRINGS = st.text() | st.sampled_from(["\ud800", "a\udc00b", "\U0001f600", "\u2028", "\x1f\b\f\t\r"])
_VALUES = edge_json_values(_STRINGS, _KEYS, finite=False)


@given(st.one_of(json_values, _VALUES).map(from_python))
@example({"b": 1, "a": [1, {"\u00e9": 2, "e": 3, "\uffff": 4}]})
@example([UNDEFINED, JSNumber(float("inf")), JSNumber(-1e21), 2**53, -(2**53), 2**53 + 1])
@example({str(n): n for n in range(40)})  # more keys than the encoder's small array
@example({"\U0001f600": 1, "\ue000": 2})  # astral keys: UTF-16 order differs from code point order
def test_stable_bytes_is_stable_stringify(value: Any) -> None:
    def check(encoder: ModuleType) -> None:
        native = encoder.stable_bytes(value)
        if native is not None:
            assert native == stable_stringify(value).encode()
        assert (native is not None) is _claimed(value)

    _every_scan(check)


@given(
    st.dictionaries(
        st.text(alphabet=st.sampled_from("ab_\u00e9\u0100\ue000\uffff"), max_size=6),
        st.integers(min_value=0, max_value=9),
        min_size=17,  # past the encoder's small array: the merge sort
        max_size=300,
    )
)
@example({f"{95 - n:02x}": n for n in range(96)})  # keys given in reverse order
def test_stable_bytes_orders_the_keys_of_big_objects(value: dict[str, int]) -> None:
    def check(encoder: ModuleType) -> None:
        assert encoder.stable_bytes(value) == stable_stringify(value).encode()

    _every_scan(check)


def test_stable_bytes_leaves_what_it_cannot_be_sure_of() -> None:
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    for value in (cyclic, (1, 2), {1: "a"}, 2**60, 1.5, b"x", "\udfff", {"\U0001f600": 1}):
        for encoder in (ENCODER, PORTABLE):
            assert encoder.stable_bytes(value) is None, value


@given(st.text(alphabet=st.sampled_from('ab "\\\x00\x1f\x7f~'), min_size=0, max_size=200))
@example("a" * 31 + '"' + "a" * 40)
@example("a" * 7 + '"' + "a" * 16)
@example("a" * 15 + "\\")
@example("a" * 8 + "\x1f" + "a" * 8 + "\x00")
def test_stable_bytes_escapes_long_ascii_strings(text: str) -> None:
    # the encoder looks at 8 bytes at a time: an escape must be found at every offset
    def check(encoder: ModuleType) -> None:
        assert encoder.stable_bytes(text) == stable_stringify(text).encode()
        for offset in range(33):
            shifted = "x" * offset + text
            assert encoder.stable_bytes(shifted) == stable_stringify(shifted).encode()

    _every_scan(check)
