"""A call's or a result's fields read at once, for the step (compiled with mypyc).

Compiled code reads an attribute of a msgspec Struct by name, through the type's attribute
lookup (the interpreter's specialised read of a slot is not open to it), and the step reads
about a dozen fields of every call and result. :func:`fields_of` reads them all in one C call
(msgspec's ``astuple``) and :data:`CALL` / :data:`RESULT` say where each field is in that
tuple, so the step reads ``values[at.tool]`` instead of ``event.tool`` (a healthy call about
7 % cheaper: docs/benchmarks.md). Other events are read by name.
"""

from __future__ import annotations

from typing import Any, Final

from msgspec.structs import astuple

from loopwatch.detectors.events import ToolCall, ToolResult

__all__ = ["CALL", "RESULT", "FieldsAt", "fields_of"]

_ASTUPLE: Final = astuple


class FieldsAt:
    """Where each field the step reads is in ``astuple`` order of one event type (-1: it has
    none, as a call has no result)."""

    __slots__ = (
        "agent_id",
        "args_digest",
        "error",
        "event_id",
        "failure_digest",
        "known_poll",
        "no_progress",
        "outcome_kind",
        "params",
        "result",
        "result_digest",
        "run_id",
        "tool",
        "tool_call_id",
        "ts",
        "unknown_tool_name",
    )

    def __init__(self, kind: type[ToolCall] | type[ToolResult]) -> None:
        names: tuple[str, ...] = kind.__struct_fields__

        def at(name: str) -> int:
            return names.index(name) if name in names else -1

        self.agent_id = at("agent_id")
        self.args_digest = at("args_digest")
        self.error = at("error")
        self.event_id = at("event_id")
        self.failure_digest = at("failure_digest")
        self.known_poll = at("known_poll")
        self.no_progress = at("no_progress")
        self.outcome_kind = at("outcome_kind")
        self.params = at("params")
        self.result = at("result")
        self.result_digest = at("result_digest")
        self.run_id = at("run_id")
        self.tool = at("tool")
        self.tool_call_id = at("tool_call_id")
        self.ts = at("ts")
        self.unknown_tool_name = at("unknown_tool_name")


CALL: Final = FieldsAt(ToolCall)
RESULT: Final = FieldsAt(ToolResult)


def fields_of(event: ToolCall | ToolResult) -> tuple[Any, ...]:
    """Every field of a call or result, in ``astuple`` order (see :data:`CALL`, :data:`RESULT`)."""
    return _ASTUPLE(event)
