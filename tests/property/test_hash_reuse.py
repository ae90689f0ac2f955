"""A result's argsHash taken from the newest pending call (no second serialisation) is exact.

:func:`detectors.stable_json.same_value` must never call two values the same when their stable
serialisations differ, and :func:`detectors.step.prepare` must give the same hashes with the
run's history at hand (the shortcut) as without it (hashing everything).
"""

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from loopwatch.detectors.events import ToolCall, ToolResult
from loopwatch.detectors.hashing import digester_for
from loopwatch.detectors.history import History
from loopwatch.detectors.stable_json import canonical_bytes, from_python, same_value
from loopwatch.detectors.step import Prepared, prepare
from tests.property.strategies import json_values

# values that compare equal in Python but serialise differently: the shortcut must see them apart
_TRAPS: list[tuple[Any, Any]] = [
    (True, 1),
    (False, 0),
    (1, 1.5),
    ({"a": True}, {"a": 1}),
    ([1, 2], [2, 1]),
    ({"a": None}, {}),
    ({"a": 1}, {"b": 1}),
    ("1", 1),
]


def test_same_value_sees_javascript_differences() -> None:
    for a, b in _TRAPS:
        left, right = from_python(a), from_python(b)
        assert not same_value(left, right), (a, b)
        assert canonical_bytes(left) != canonical_bytes(right)
    assert same_value(
        from_python({"b": [1, {"c": 2.5}], "a": "x"}), from_python({"a": "x", "b": [1, {"c": 2.5}]})
    )


@settings(max_examples=400, deadline=None)
@given(json_values, json_values)
def test_same_value_implies_the_same_serialisation(a: Any, b: Any) -> None:
    left, right = from_python(a), from_python(b)
    if same_value(left, right):
        assert canonical_bytes(left) == canonical_bytes(right)
    copy = from_python(a)
    assert same_value(left, copy)


@settings(max_examples=300, deadline=None)
@given(
    json_values,
    json_values,
    st.sampled_from(["read", "update_plan", "exec"]),
    st.sampled_from(["read", "exec"]),
    st.sampled_from(["c1", "c2", None]),
    st.sampled_from(["xxh3", "sha256"]),
    st.sampled_from(["xxh3", "sha256"]),
)
def test_prepare_with_history_hashes_as_without(
    call_params: Any,
    result_params: Any,
    call_tool: str,
    result_tool: str,
    result_call_id: str | None,
    call_digest: str,
    result_digest: str,
) -> None:
    call = ToolCall(
        event_id="e1", run_id="r", tool=call_tool, params=from_python(call_params), tool_call_id="c1"
    )
    history = History()
    called = prepare(call, digester_for(call_digest), frozenset())
    history.append(call.tool, called.args_hash, "c1", None, None, None, 30, params=call.params)
    for params in (from_python(result_params), from_python(call_params)):
        result = ToolResult(
            event_id="e2",
            run_id="r",
            tool=result_tool,
            params=params,
            result={"content": []},
            tool_call_id=result_call_id,
        )
        digester = digester_for(result_digest)
        expected = _fields(prepare(result, digester, frozenset(), "2026-08"))
        assert _fields(prepare(result, digester, frozenset(), "2026-08", history)) == expected


def _fields(prepared: Prepared) -> tuple[Any, ...]:
    return tuple(getattr(prepared, name) for name in _PREPARED_FIELDS)


_PREPARED_FIELDS = (
    "args_hash",
    "failure_id",
    "kind",
    "known_poll",
    "no_progress",
    "result_hash",
    "unknown_tool_name",
)


def test_the_newest_pending_call_answers_only_its_own_result() -> None:
    digester = digester_for("xxh3")
    params = from_python({"path": "a.txt", "flags": [True, 1]})
    args_hash = digester.args_hash("read", params)
    history = History()
    record = history.append("read", args_hash, "c1", None, None, None, 30, params=params)
    size = digester.hex_size
    assert (
        history.newest_call_hash("read", "c1", from_python({"flags": [True, 1], "path": "a.txt"}), size)
        == args_hash
    )
    assert (
        history.newest_call_hash("read", "c1", from_python({"path": "a.txt", "flags": [1, 1]}), size) is None
    )
    assert history.newest_call_hash("read", "c2", params, size) is None
    assert history.newest_call_hash("read", None, params, size) is None
    assert history.newest_call_hash("write", "c1", params, size) is None
    assert history.newest_call_hash("read", "c1", params, digester_for("sha256").hex_size) is None
    history.fill(record, "h", None)
    assert history.newest_call_hash("read", "c1", params, size) is None


def test_only_the_newest_record_keeps_its_params() -> None:
    """A run of unanswered calls holds one call's params, not the window's."""
    history = History()
    for index in range(5):
        params = from_python({"path": f"f{index}", "content": "x" * 1000})
        history.append("write", f"write:{index:032x}", f"c{index}", None, None, None, 30, params=params)
    assert [record.params is not None for record in history.records] == [False] * 4 + [True]
