"""Hypothesis strategies: random tool traffic with plenty of repetition."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from tests.helpers import text_result

TOOLS = ["read", "exec", "process", "command_status", "write"]
PARAMS = [{"path": "a"}, {"path": "b"}, {"action": "poll", "sessionId": "s"}, {"action": "log"}, {}]
RESULTS: list[Any] = [
    text_result("same"),
    text_result("other"),
    text_result("(no new output)", status="running"),
    None,
    # revision 2026-08 classifications: two exec failures of one identity (drifting pid), another
    # failure, a success, a no-op write that echoes its path, the detector's own loop veto
    text_result("", status="failed", exitCode=2, aggregated="make: build failed (pid 41)"),
    text_result("", status="failed", exitCode=2, aggregated="make: build failed (pid 77)"),
    text_result("", status="failed", exitCode=2, aggregated="make: link failed"),
    text_result("ok", status="completed", exitCode=0),
    text_result("no changes to a", changed=False),
    text_result("no changes to b", changed=False),
    text_result("", status="blocked", deniedReason="tool-loop"),
]
ERRORS = ["Tool exec not found", "Unknown tool: x", "boom"]

# one step: (kind, tool index, params index, outcome index)
steps = st.lists(
    st.tuples(
        st.sampled_from(["call", "outcome", "both", "both", "both"]),
        st.integers(0, len(TOOLS) - 1),
        st.integers(0, len(PARAMS) - 1),
        st.integers(0, len(RESULTS) + len(ERRORS) - 1),
    ),
    max_size=80,
)

# the same shape, concentrated on one tool (exec or write) with few arguments and mostly
# no-progress or failing outcomes: the traffic that builds argument churn (errors, no-op
# writes) and exec terminal-failure tails; now and then another tool or outcome breaks it
_FOCUS_OUTCOMES = [4, 5, 6, 7, 8, 9, 10, 11, 13, 0]
focused_steps = st.tuples(st.sampled_from([1, 4]), st.sampled_from([4, 5, 8, 9, 11, 13])).flatmap(
    lambda focus: st.lists(
        st.tuples(
            st.sampled_from(["call", "outcome", "both", "both", "both", "both", "both"]),
            st.sampled_from([focus[0]] * 30 + [0, 1 if focus[0] == 4 else 4]),
            st.sampled_from([0, 1] * 6 + [4]),
            st.sampled_from([focus[1]] * 40 + _FOCUS_OUTCOMES),
        ),
        max_size=80,
    )
)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=4), children, max_size=4)
    ),
    max_leaves=20,
)


def outcome_of(index: int) -> tuple[Any, str | None]:
    """``(result, error)`` for an outcome index."""
    if index < len(RESULTS):
        return RESULTS[index], None
    return None, ERRORS[index - len(RESULTS)]


def edge_json_values(
    strings: st.SearchStrategy[str], keys: st.SearchStrategy[str], finite: bool
) -> st.SearchStrategy[Any]:
    """JSON-like values near the edges of JavaScript's: integers around 2**53, any floats
    (non-finite ones unless ``finite``), the given strings and object keys."""
    return st.recursive(
        st.none()
        | st.booleans()
        | st.integers(min_value=-(2**54), max_value=2**54)
        | st.floats(allow_nan=not finite, allow_infinity=not finite)
        | strings,
        lambda children: st.lists(children, max_size=4) | st.dictionaries(keys, children, max_size=5),
        max_leaves=20,
    )
