"""Digests and argument hashes (spec §3.1, §3.2, §11 E2).

``digest(x)`` is a hex digest of the stable serialisation of ``x``: XXH3-128 by default,
SHA-256 (byte-identical to OpenClaw) when asked. ``argsHash`` keeps the tool name in clear:
``"{tool}:{digest(normalizedParams)}"``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any, Final

import xxhash

from loopwatch.detectors.stable_json import canonical_bytes

__all__ = ["Digester", "content_text", "digester_for", "js_trim", "update_plan_shape"]

_HASHERS: Final[dict[str, Callable[[bytes], str]]] = {
    "xxh3": xxhash.xxh3_128_hexdigest,
    "sha256": lambda data: hashlib.sha256(data).hexdigest(),
}


def update_plan_shape(value: Any) -> Any:
    """The ``update_plan`` shape of spec §3.2 (non-objects unchanged)."""
    if not isinstance(value, dict):
        return value
    plan = value.get("plan")
    entries = plan if isinstance(plan, list) else []
    statuses: list[Any] = []
    presence: list[bool] = []
    for entry in entries:
        if isinstance(entry, dict):
            status = entry.get("status")
            step = entry.get("step")
            statuses.append(status if isinstance(status, str) else None)
            presence.append(isinstance(step, str) and bool(js_trim(step)))
        else:
            statuses.append(None)
            presence.append(False)
    explanation = value.get("explanation")
    return {
        "planLength": len(entries),
        "statuses": statuses,
        "stepPresence": presence,
        "hasExplanation": isinstance(explanation, str) and bool(js_trim(explanation)),
    }


# String.prototype.trim: WhiteSpace and LineTerminator code points of ECMAScript.
_JS_WHITESPACE: Final = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009"
    "\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
)


def js_trim(text: str) -> str:
    """JavaScript's ``String.prototype.trim``."""
    return text.strip(_JS_WHITESPACE)


class Digester:
    """Hashes stable serialisations with one algorithm (``xxh3`` or ``sha256``)."""

    __slots__ = ("algorithm", "hex", "hex_size", "xxh3")

    def __init__(self, algorithm: str = "xxh3") -> None:
        self.algorithm = algorithm
        #: XXH3-128: what ``raw_json.args_hash`` and ``raw_json.outcome_hash`` give from text
        self.xxh3 = algorithm == "xxh3"
        self.hex = _HASHERS[algorithm]
        self.hex_size = len(self.hex(b""))  # hex characters of one digest

    def digest(self, value: Any) -> str:
        """Digest of a wire-decoded value (fast canonical path)."""
        return self.hex(canonical_bytes(value))

    def digest_text(self, text: str) -> str:
        """Digest of a string value (its quoted JSON form is what gets hashed)."""
        return self.hex(canonical_bytes(text))

    def args_hash(self, tool: str, params: Any) -> str:
        """``argsHash`` of a call (spec §3.2, with ``update_plan`` normalisation)."""
        if tool == "update_plan":
            params = update_plan_shape(params)
        return f"{tool}:{self.digest(params)}"


_DIGESTERS: Final[dict[str, Digester]] = {}


class _Last:
    """The digester :func:`digester_for` gave last (asked for once per event: an attribute,
    no dict lookup; one object holds the algorithm and its digester, so a thread that swaps
    it in never pairs one with the other's)."""

    __slots__ = ("digester",)

    def __init__(self) -> None:
        self.digester: Digester | None = None


_LAST: Final = _Last()


def digester_for(algorithm: str) -> Digester:
    """The shared :class:`Digester` of an algorithm."""
    digester = _LAST.digester
    if digester is not None and digester.algorithm == algorithm:
        return digester
    digester = _DIGESTERS.get(algorithm)
    if digester is None:
        digester = _DIGESTERS[algorithm] = Digester(algorithm)
    _LAST.digester = digester
    return digester


def content_text(result: dict[str, Any]) -> str:
    """The text of a result's content blocks (OpenClaw's extractTextContent): the ``text`` of
    each block whose ``type`` and ``text`` are strings, joined by newlines, trimmed."""
    content = result.get("content")
    if type(content) is not list:
        return ""
    if len(content) == 1:  # the common shape: one text block
        entry = content[0]
        if type(entry) is dict:
            text = entry.get("text")
            if type(text) is str and type(entry.get("type")) is str:
                return text.strip(_JS_WHITESPACE)
        return ""
    texts = [
        entry["text"]
        for entry in content
        if isinstance(entry, dict)
        and isinstance(entry.get("type"), str)
        and isinstance(entry.get("text"), str)
    ]
    if not texts:
        return ""
    return js_trim(texts[0] if len(texts) == 1 else "\n".join(texts))
