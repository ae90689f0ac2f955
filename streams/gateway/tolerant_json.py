"""JSON as agent runtimes send it: msgspec first, the standard library for what msgspec refuses
(lone UTF-16 surrogates, which JavaScript writes); a failure is an :class:`InvalidEvent`.

Numbers follow the one rule of every door (docs/wire-numbers.md): a number beyond a double
(``1e400``, ``-1e309``) is the value JavaScript's ``JSON.parse`` gives, ±Infinity, held as a
:class:`~detectors.stable_json.JSNumber` and written back as ``1e999`` / ``-1e999`` (read again,
the same value), so the event decoder then takes it where any JSON value may stand and refuses
it, naming the field, where a typed number must fit; ``NaN`` and ``Infinity`` are not JSON.
Every other number is the plain value msgspec gives."""

from __future__ import annotations

import json
import math
from typing import Any

import msgspec

from loopwatch.detectors.events import InvalidEvent
from loopwatch.detectors.stable_json import JSNumber, wire_enc_hook

__all__ = ["TOO_DEEP", "as_utf8", "dumps", "loads"]

TOO_DEEP = "not valid JSON: nested too deeply"


_BOM_UTF8 = b"\xef\xbb\xbf"


def as_utf8(body: bytes) -> bytes:
    """``body`` as UTF-8 JSON: without a UTF-8 byte order mark, and from UTF-16 or UTF-32
    (what PowerShell and .NET clients may send; told by their byte order mark or their zero
    bytes, as RFC 4627 says) transcoded, a lone surrogate kept as its ``\\u`` escape."""
    if body.startswith(_BOM_UTF8):
        return body[len(_BOM_UTF8) :]
    if not body or (0 < body[0] < 0x80 and (len(body) < 2 or body[1])):  # (UTF-8 JSON: ASCII first)
        return body
    encoding = json.detect_encoding(body)
    if not encoding.startswith(("utf-16", "utf-32")):
        return body
    try:
        text = body.decode(encoding, "surrogatepass")
    except UnicodeDecodeError as exc:
        raise InvalidEvent(
            f"not valid JSON: the body looks like {encoding.upper()} but does not decode: {exc}"
        ) from exc
    return text.encode("utf-8", "backslashreplace")  # (a lone surrogate can only be in a string)


def _number(text: str) -> float | JSNumber:
    """A JSON number msgspec gives as a float: the float, or (beyond a double) JavaScript's
    ±Infinity as a :class:`JSNumber` (a float ``inf`` would be written back as ``null``)."""
    value = float(text)
    return value if math.isfinite(value) else JSNumber(value)


_DECODE = msgspec.json.Decoder(float_hook=_number).decode
_ENCODE = msgspec.json.Encoder(enc_hook=wire_enc_hook).encode


def loads(body: bytes) -> tuple[Any, bool]:
    """The JSON value of ``body``, and whether it holds lone surrogates (then only the standard
    library reads it, and :func:`dumps` must write it back)."""
    try:
        return _DECODE(body), False
    except msgspec.DecodeError as exc:
        try:  # lone UTF-16 surrogates: JavaScript sends them, msgspec refuses them
            return json.loads(body, parse_float=_number, parse_constant=_not_json), True
        except (ValueError, TypeError):
            raise InvalidEvent(f"not valid JSON: {exc}") from exc
        except RecursionError:
            raise InvalidEvent(TOO_DEEP) from exc
    except RecursionError as exc:
        raise InvalidEvent(TOO_DEEP) from exc


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # (the standard library reads NaN and Infinity)


def dumps(value: Any, surrogates: bool) -> bytes:
    """``value`` (as :func:`loads` gives it) as JSON the event decoder reads back the same.
    Raises ``RecursionError`` for nesting deeper than Python's recursion limit."""
    if surrogates:  # ASCII, surrogates escaped: decode_event reads them
        try:
            return json.dumps(value).encode()
        except TypeError:  # a JSNumber (a number beyond a double): written one value at a time
            parts: list[str] = []
            _write_ascii(value, parts)
            return "".join(parts).encode()
    return _ENCODE(value)


def _write_ascii(value: Any, out: list[str]) -> None:
    """``json.dumps`` (ASCII, lone surrogates as their escapes) that writes a :class:`JSNumber`
    as the wire does (``json.dumps`` would write ``Infinity``, which is not JSON)."""
    if isinstance(value, dict):
        out.append("{")
        for index, (key, item) in enumerate(value.items()):
            out.append(',"' if index else '"')
            out.append(json.dumps(str(key))[1:])
            out.append(":")
            _write_ascii(item, out)
        out.append("}")
    elif isinstance(value, (list, tuple)):
        out.append("[")
        for index, item in enumerate(value):
            if index:
                out.append(",")
            _write_ascii(item, out)
        out.append("]")
    elif isinstance(value, JSNumber):
        out.append(bytes(wire_enc_hook(value) or b"null").decode())
    else:
        out.append(json.dumps(value))
