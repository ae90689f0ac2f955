"""Stable serialisation: byte-identical to OpenClaw's ``stableStringify`` (spec §3.1).

Two paths give the same bytes:

* :func:`stable_stringify` walks any Python value and reproduces JavaScript exactly (number
  text, ``JSON.stringify`` string escapes, keys in UTF-16 code-unit order, ``undefined``,
  non-finite numbers, cycles, lone surrogates). It is the reference and the slow path.
* :func:`canonical_bytes` is the hot path for values decoded by :data:`WIRE_DECODER`, whose
  float hook already turned every JSON number into JavaScript's value (integral doubles become
  ``int``, others :class:`JSNumber`). msgspec then encodes with sorted keys in C. Output that
  could differ from JavaScript (integers beyond 2**53, keys whose UTF-8 order can differ from
  UTF-16 order) is detected by one regex scan and redone by the slow path.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any, Final, cast

import msgspec

from loopwatch.detectors.json_scan import javascript_safe

__all__ = [
    "UNDEFINED",
    "WIRE_DECODER",
    "JSNumber",
    "Undefined",
    "canonical_bytes",
    "encodable",
    "from_python",
    "js_number_text",
    "js_string",
    "loads_with_surrogates",
    "plain",
    "same_value",
    "stable_stringify",
    "wire_enc_hook",
]

_MAX_SAFE: Final = 2**53


class Undefined:
    """JavaScript ``undefined`` (a property read that found nothing); serialises bare."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "UNDEFINED"


UNDEFINED: Final = Undefined()


class JSNumber:
    """A non-integral (or huge) JSON number, kept with its JavaScript text."""

    __slots__ = ("value",)

    def __init__(self, value: float) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JSNumber) and other.value == self.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return f"JSNumber({self.value!r})"


def js_number_text(value: float) -> str:
    """``String(value)`` in JavaScript (Number::toString), for finite and non-finite values."""
    if value != value:
        return "NaN"
    if value in (math.inf, -math.inf):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "0"
    if value.is_integer() and abs(value) <= _MAX_SAFE:
        return str(int(value))
    sign = "-" if value < 0 else ""
    mantissa, _, exp_text = repr(abs(value)).partition("e")
    exponent = int(exp_text) if exp_text else 0
    whole, _, frac = mantissa.partition(".")
    digits = (whole + frac).lstrip("0")
    # position of the decimal point relative to the digit string (ECMAScript's n)
    n = len(whole) + exponent if whole != "0" else exponent - (len(frac) - len(frac.lstrip("0")))
    digits = digits.rstrip("0") or "0"
    k = len(digits)
    if k <= n <= 21:
        return sign + digits + "0" * (n - k)
    if 0 < n <= 21:
        return sign + digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return sign + "0." + "0" * (-n) + digits
    e = n - 1
    exp = f"e+{e}" if e >= 0 else f"e-{-e}"
    return sign + (digits if k == 1 else digits[0] + "." + digits[1:]) + exp


def _js_int_text(value: int) -> str:
    """An integer as stableStringify writes the number JavaScript reads it as: beyond a double
    (over 308 digits), JavaScript's ``JSON.parse`` gives ±Infinity, written ``"Infinity"``."""
    if -_MAX_SAFE <= value <= _MAX_SAFE:
        return str(value)
    try:
        return js_number_text(float(value))
    except OverflowError:
        return '"Infinity"' if value > 0 else '"-Infinity"'


_SURROGATES = re.compile(r"[\ud800-\udfff]")  # escapes for re: mypyc refuses surrogates in literals
_PAIR = re.compile(r"[\ud800-\udbff][\udc00-\udfff]")
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_NEEDS_ESCAPE = re.compile('["\\\\\x00-\x1f]')


def encodable(text: str) -> bool:
    """Whether ``text`` is valid Unicode (UTF-8 can hold it): no UTF-16 surrogate code point."""
    return _SURROGATES.search(text) is None


def _sanitize_surrogates(text: str) -> str:
    text = _PAIR.sub(lambda m: m.group().encode("utf-16-le", "surrogatepass").decode("utf-16-le"), text)
    return _SURROGATES.sub("\ufffd", text)


def js_string(text: str) -> str:
    """``JSON.stringify(text)`` after OpenClaw's ``sanitizeSurrogates``."""
    if _SURROGATES.search(text):
        text = _sanitize_surrogates(text)
    if _NEEDS_ESCAPE.search(text):
        text = _NEEDS_ESCAPE.sub(lambda m: _ESCAPES.get(m.group(), f"\\u{ord(m.group()):04x}"), text)
    return f'"{text}"'


def _utf16_key(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")


def stable_stringify(value: Any) -> str:
    """The exact text of OpenClaw's ``stableStringify(value)`` (reference implementation)."""
    parts: list[str] = []
    _write(value, parts, set())
    return "".join(parts)


def _write(value: Any, out: list[str], stack: set[int]) -> None:  # noqa: C901 - one type switch
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, str):
        out.append(js_string(value))
    elif isinstance(value, int):
        out.append(_js_int_text(value))
    elif isinstance(value, float):
        text = js_number_text(value)
        out.append(text if math.isfinite(value) else f'"{text}"')
    elif isinstance(value, JSNumber):
        text = js_number_text(value.value)
        out.append(text if math.isfinite(value.value) else f'"{text}"')
    elif value is UNDEFINED:
        out.append("undefined")
    elif isinstance(value, msgspec.Raw):
        _write(plain(value), out, stack)
    elif isinstance(value, (list, tuple, dict)):
        marker = id(value)
        if marker in stack:
            out.append('"[Circular]"')
            return
        stack.add(marker)
        if isinstance(value, dict):
            out.append("{")
            keys = sorted((str(k) for k in value), key=_utf16_key)
            lookup = {str(k): v for k, v in value.items()}
            for index, key in enumerate(keys):
                if index:
                    out.append(",")
                out.append(js_string(key))
                out.append(":")
                _write(lookup[key], out, stack)
            out.append("}")
        else:
            out.append("[")
            for index, item in enumerate(value):
                if index:
                    out.append(",")
                _write(item, out, stack)
            out.append("]")
        stack.discard(marker)
    elif isinstance(value, BaseException):
        _write({"message": str(value), "name": type(value).__name__, "stack": UNDEFINED}, out, stack)
    elif isinstance(value, (bytes, bytearray, memoryview)):
        import base64

        _write({"data": base64.b64encode(bytes(value)).decode(), "type": "Uint8Array"}, out, stack)
    else:
        out.append(js_string(str(value)))


def _float_hook(text: str) -> int | JSNumber:
    value = float(text)
    if value.is_integer() and abs(value) <= _MAX_SAFE:
        return int(value)
    return JSNumber(value)


def _enc_hook(value: Any) -> Any:
    if isinstance(value, JSNumber):
        text = js_number_text(value.value)
        return msgspec.Raw((text if math.isfinite(value.value) else f'"{text}"').encode())
    if value is UNDEFINED:
        return msgspec.Raw(b"undefined")
    raise NotImplementedError(f"cannot serialise {type(value).__name__}")


def wire_enc_hook(value: Any) -> Any:
    """msgspec ``enc_hook`` writing :class:`JSNumber` back as a JSON number (wire encoding)."""
    if isinstance(value, JSNumber):
        number = value.value
        if math.isfinite(number):
            return msgspec.Raw(js_number_text(number).encode())
        if number == number:
            return msgspec.Raw(b"1e999" if number > 0 else b"-1e999")
        return None
    raise NotImplementedError(f"cannot encode {type(value).__name__}")


#: Decodes JSON so that numbers already carry their JavaScript value (see module docstring).
WIRE_DECODER: Final = msgspec.json.Decoder(float_hook=_float_hook)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def loads_with_surrogates(data: bytes | str) -> Any:
    """JSON that :data:`WIRE_DECODER` refused for a lone UTF-16 surrogate escape (``"\\ud800"``:
    JavaScript writes and reads them), read by the stdlib parser with the same numbers.

    Raises :class:`ValueError` where that parser refuses it too, and for what msgspec refuses
    on other grounds (``NaN``, ``Infinity``, bytes that are not UTF-8); ``RecursionError`` for
    nesting deeper than Python's recursion limit."""
    text = data.decode("utf-8") if isinstance(data, bytes) else data  # UnicodeDecodeError: a ValueError
    return json.loads(text, parse_float=_float_hook, parse_int=int, parse_constant=_no_constant)


_SORTED: Final = msgspec.json.Encoder(order="sorted", enc_hook=_enc_hook)


def _raw_canonical() -> Callable[[Any], bytes | None] | None:
    """``_raw_json.canonical`` where it was built (without it, :func:`canonical_bytes` decodes
    the text and serialises the value, as ``raw_json.python_canonical`` does)."""
    try:
        from loopwatch.detectors._raw_json import canonical
    except ImportError:
        return None
    return canonical


_RAW_CANONICAL: Final = _raw_canonical()
_RAW: Final = msgspec.Raw


def plain(value: Any) -> Any:
    """``value`` itself, or the value of a ``msgspec.Raw`` (a decoded event's ``params`` and
    ``result`` are kept as their JSON text: see :mod:`detectors.raw_json`)."""
    return WIRE_DECODER.decode(value) if type(value) is _RAW else value


def _number_json(number: JSNumber) -> str:
    """The JSON text of a JavaScript number (non-finite ones as stableStringify quotes them)."""
    text = js_number_text(number.value)
    return text if math.isfinite(number.value) else f'"{text}"'


def _native_encoder() -> Callable[[Any], bytes | None] | None:
    """stableStringify in C, where it was built (``_stable_bytes.c``), bound to JavaScript's
    number and undefined; ``None`` where it was not (no compiler, or sources only)."""
    try:
        from loopwatch.detectors._stable_bytes import bind, stable_bytes
    except ImportError:
        return None
    bind(JSNumber, _number_json, UNDEFINED)
    return stable_bytes


#: Final: a C static when compiled (a plain module name is a dict lookup at every call)
_NATIVE: Final = _native_encoder()


def canonical_bytes(value: Any) -> bytes:
    """UTF-8 bytes of ``stable_stringify(value)`` for wire-decoded values, fast.

    The C encoder answers where it is sure (see ``_stable_bytes.c``); msgspec's sorted
    encoding otherwise, checked by :func:`~detectors.json_scan.javascript_safe` and redone by
    the reference where it could differ from JavaScript. A ``msgspec.Raw`` (JSON text) is
    read in C where ``_raw_json`` was built and is sure of it, else decoded first."""
    if type(value) is _RAW:
        if _RAW_CANONICAL is not None:
            known = _RAW_CANONICAL(value)
            if known is not None:
                return known
        value = WIRE_DECODER.decode(value)
    if _NATIVE is not None:
        native = _NATIVE(value)
        if native is not None:
            return native
    try:
        out = _SORTED.encode(value)
    except (NotImplementedError, TypeError, UnicodeEncodeError, OverflowError, ValueError):
        return stable_stringify(value).encode()
    if javascript_safe(out):  # no integer beyond 2**53, no key whose UTF-8 and UTF-16 orders differ
        return out
    return stable_stringify(value).encode()


def same_value(a: object, b: object) -> bool:
    """Whether two wire-decoded values are the same JSON value (so their stable serialisations
    are equal): the same types all the way down (``true`` is not ``1``), dicts equal as key
    sets, lists in order. Types the wire decoder never gives answer False (not known equal)."""
    if a is b:
        return True
    if type(a) is _RAW or type(b) is _RAW:  # JSON text: the same text, or the same value
        if type(a) is _RAW and type(b) is _RAW:
            return a == b or canonical_bytes(a) == canonical_bytes(b)
        return same_value(plain(a), plain(b))
    if type(a) is not type(b):
        return False
    if isinstance(a, str):
        return a == cast(str, b)
    if isinstance(a, dict):
        other_dict = cast(dict[str, object], b)
        if len(a) != len(other_dict):
            return False
        for key, item in a.items():
            other = other_dict.get(key, _ABSENT)
            if other is _ABSENT or not same_value(item, other):
                return False
        return True
    if isinstance(a, list):
        other_list = cast(list[object], b)
        if len(a) != len(other_list):
            return False
        return all(same_value(item, other_list[index]) for index, item in enumerate(a))
    if isinstance(a, int):  # bool too: the types are equal already
        return a == cast(int, b)
    if isinstance(a, JSNumber):
        return a.value == cast(JSNumber, b).value
    return False


_ABSENT: Final = object()


def from_python(value: Any) -> Any:
    """A Python value as the wire decoder would give it (numbers with JavaScript's value)."""
    if isinstance(value, msgspec.Raw):
        return plain(value)
    if value is None or value is True or value is False or isinstance(value, (str, int, JSNumber)):
        return value
    if isinstance(value, float):
        if value.is_integer() and abs(value) <= _MAX_SAFE:
            return int(value)
        return JSNumber(value)
    if isinstance(value, dict):
        return {str(key): from_python(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [from_python(item) for item in value]
    return value
