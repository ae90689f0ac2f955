"""JSON as agent runtimes send it: msgspec first, the standard library for what msgspec refuses
(lone UTF-16 surrogates, which JavaScript writes); a failure is an :class:`InvalidEvent`."""

from __future__ import annotations

import json
from typing import Any

import msgspec

from loopwatch.detectors.events import InvalidEvent

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


def loads(body: bytes) -> tuple[Any, bool]:
    """The JSON value of ``body``, and whether it holds lone surrogates (then only the standard
    library reads it, and :func:`dumps` must write it back)."""
    try:
        return msgspec.json.decode(body), False
    except msgspec.DecodeError as exc:
        try:  # lone UTF-16 surrogates: JavaScript sends them, msgspec refuses them
            return json.loads(body, parse_constant=_not_json), True
        except (ValueError, TypeError):
            raise InvalidEvent(f"not valid JSON: {exc}") from exc
        except RecursionError:
            raise InvalidEvent(TOO_DEEP) from exc
    except RecursionError as exc:
        raise InvalidEvent(TOO_DEEP) from exc


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # (the standard library reads NaN and Infinity)


def dumps(value: Any, surrogates: bool) -> bytes:
    if surrogates:
        return json.dumps(value).encode()  # ASCII, surrogates escaped: decode_event reads them
    return msgspec.json.encode(value)
