"""Hypothesis strategies: random tool traffic with plenty of repetition."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from tests.helpers import text_result

TOOLS = ["read", "exec", "process", "command_status"]
PARAMS = [{"path": "a"}, {"path": "b"}, {"action": "poll", "sessionId": "s"}, {"action": "log"}, {}]
RESULTS: list[Any] = [
    text_result("same"),
    text_result("other"),
    text_result("(no new output)", status="running"),
    None,
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
