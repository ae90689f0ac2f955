"""Events built from a runtime's Python values: the one way the in-process detector and the
Kafka client turn a call or its outcome into a wire event.

``params`` and ``result`` go through :func:`detectors.stable_json.from_python` (what JSON
would carry); an error given as an exception is its text (its type's name when the text is
empty); ``usage`` is read by :func:`detectors.events.as_usage`.
"""

from __future__ import annotations

from typing import Any

from msgspec import UNSET

from loopwatch.detectors.events import ToolCall, ToolResult, Usage, as_usage
from loopwatch.detectors.outcomes import MISSING
from loopwatch.detectors.stable_json import from_python

__all__ = ["call_event", "result_event"]


def call_event(
    event_id: str,
    run_id: str,
    tool: str,
    params: Any,
    *,
    agent_id: str,
    session_id: str | None = None,
    ts: int | None = None,
    tool_call_id: str | None = None,
    usage: Usage | dict[str, Any] | None = None,
    parent_run_id: str | None = None,
    batch_id: str | None = None,
) -> ToolCall:
    """A ``tool_call`` (``parent_run_id``: the run that started this one, on its first call;
    ``batch_id``: shared by the calls of one model turn)."""
    return ToolCall(
        event_id=event_id,
        run_id=run_id,
        session_id=session_id,
        agent_id=agent_id,
        ts=ts,
        tool=tool,
        params=from_python(params),
        tool_call_id=tool_call_id,
        usage=as_usage(usage),
        parent_run_id=parent_run_id if parent_run_id else UNSET,
        batch_id=batch_id if batch_id else UNSET,
    )


def result_event(
    event_id: str,
    run_id: str,
    tool: str,
    params: Any,
    *,
    agent_id: str,
    result: Any = UNSET,
    error: BaseException | str | None = None,
    session_id: str | None = None,
    ts: int | None = None,
    tool_call_id: str | None = None,
) -> ToolResult:
    """A ``tool_result``: ``error`` raised (it wins), else ``result`` returned (neither: an
    outcome with nothing to record)."""
    if error is not None:
        error_value: Any = str(error) or (type(error).__name__ if isinstance(error, BaseException) else "")
        result_value: Any = UNSET
    else:
        error_value = UNSET
        result_value = UNSET if result is UNSET or result is MISSING else from_python(result)
    return ToolResult(
        event_id=event_id,
        run_id=run_id,
        session_id=session_id,
        agent_id=agent_id,
        ts=ts,
        tool=tool,
        params=from_python(params),
        result=result_value,
        error=error_value,
        tool_call_id=tool_call_id,
    )
