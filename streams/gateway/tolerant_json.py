"""JSON as agent runtimes send it: msgspec first, the standard library for what msgspec refuses
(lone UTF-16 surrogates, which JavaScript writes); a failure is an :class:`InvalidEvent`."""

from __future__ import annotations

import json
from typing import Any

import msgspec

from loopwatch.detectors.events import InvalidEvent

__all__ = ["TOO_DEEP", "dumps", "loads"]

TOO_DEEP = "not valid JSON: nested too deeply"


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
