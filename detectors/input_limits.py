"""What one event may hold: the limits every door checks before it commits to anything.

An event breaking one of them is invalid (:class:`detectors.events.InvalidEvent` names the
field), so it is refused where it enters — a 400 from the gateway, the dead-letter topic on
Kafka, a skipped line in ``run`` / ``import`` / ``replay`` — and never reaches a key, a hash,
a state or a metric:

* identity strings (ids, tool names, digests) encode to UTF-8 (no lone UTF-16 surrogates) and
  hold at most :data:`MAX_ID_BYTES` bytes;
* ``ts`` and token counts fit in a signed 64-bit integer;
* ``params``, ``result`` and ``error`` nest at most :data:`MAX_NESTING` arrays and objects.

Lone surrogates stay allowed *inside* ``params`` / ``result`` / ``error``: JavaScript accepts
them and OpenClaw sanitises them before hashing (see :mod:`detectors.stable_json`).
"""

from __future__ import annotations

from typing import Any, Final

__all__ = [
    "IDENTITY_FIELDS",
    "INT64_MAX",
    "INT64_MIN",
    "MAX_ID_BYTES",
    "MAX_NESTING",
    "identity_problem",
    "int64_problem",
    "nesting_exceeds",
]

#: The most UTF-8 bytes an id, a tool name or a digest may hold.
MAX_ID_BYTES: Final = 512
#: The deepest nesting of arrays and objects inside ``params``, ``result`` or ``error``.
MAX_NESTING: Final = 64
INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1

#: The string fields of an event that name or key something (checked by :func:`identity_problem`).
IDENTITY_FIELDS: Final = (
    "event_id",
    "run_id",
    "session_id",
    "agent_id",
    "tool",
    "tool_call_id",
    "args_digest",
    "result_digest",
    "unknown_tool_name",
    "failure_digest",
    "parent_run_id",
    "root_run_id",
    "batch_id",
)


def identity_problem(value: str) -> str | None:
    """Why ``value`` cannot be an id (None: it can)."""
    if value.isascii():  # O(1) in CPython: the common case costs one length check
        size = len(value)
    else:
        try:
            size = len(value.encode("utf-8"))
        except UnicodeEncodeError:
            return "must be valid Unicode (it holds a lone UTF-16 surrogate)"
    if size > MAX_ID_BYTES:
        return f"holds {size} bytes, more than the limit of {MAX_ID_BYTES}"
    return None


def int64_problem(value: int) -> str | None:
    """Why ``value`` cannot be stored as a signed 64-bit integer (None: it can)."""
    if INT64_MIN <= value <= INT64_MAX:
        return None
    return "must fit in a signed 64-bit integer"


def nesting_exceeds(value: Any, limit: int = MAX_NESTING) -> bool:
    """Whether ``value`` nests more than ``limit`` arrays and objects (iterative: no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False
