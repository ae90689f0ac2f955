"""F6a ``delegation_depth``: a run started deeper in a delegation chain than ``maxDepth``."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from loopwatch.config import ConfigError, FleetConfig, parse_config_text
from loopwatch.detectors.engine import Engine
from loopwatch.detectors.events import Abort, Output, ToolCall, Verdict
from loopwatch.detectors.state import RunState
from tests.helpers import Trace, text_result


def config(
    delegation: dict[str, Any] | None = None, agents: list[dict[str, Any]] | None = None
) -> FleetConfig:
    document: dict[str, Any] = {"tools": {"loopDetection": {"enabled": True}}}
    if delegation is not None:
        document["loopwatch"] = {"detectors": {"delegation": delegation}}
    if agents is not None:
        document["agents"] = {"list": agents}
    return parse_config_text(json.dumps(document))


def subagent(depth: int | None, calls: int = 3, parent: str | None = "parent-run") -> Trace:
    """A run whose first event names its chain; then distinct, healthy calls."""
    trace = Trace("child")
    for n in range(calls):
        trace.both("read", {"path": f"/file-{n}"}, text_result(f"content {n}"))
    first = trace.events[0]
    assert isinstance(first, ToolCall)
    chain: dict[str, Any] = {}
    if parent is not None:
        chain["parent_run_id"] = parent
        chain["root_run_id"] = "root-run"
    if depth is not None:
        chain["depth"] = depth
    trace.events[0] = msgspec.structs.replace(first, **chain)
    return trace


def run(trace: Trace, fleet: FleetConfig) -> list[Output]:
    engine = Engine(fleet)
    return [out for event in trace.events for out in engine.process(event)]


ON = {"enabled": True, "maxDepth": 3}


def test_a_run_deeper_than_the_limit_is_blocked_then_aborted() -> None:
    outputs = run(subagent(4), config(ON))
    verdicts = [o for o in outputs if isinstance(o, Verdict)]
    assert [(v.detector, v.action, v.count) for v in verdicts] == [("delegation_depth", "block", 4)] * 3
    assert verdicts[0].message == (
        "CRITICAL: this agent was started 4 levels deep in a delegation chain (limit 3). "
        "Do not start more agents; finish with what you have and report back."
    )
    aborts = [o for o in outputs if isinstance(o, Abort)]
    assert [a.reason for a in aborts] == ["tool_loop_recovery_exhausted"]
    assert aborts[0].trigger_event_id == verdicts[1].trigger_event_id  # at the second critical


def test_at_the_limit_and_in_roots_nothing_happens() -> None:
    assert run(subagent(3), config(ON)) == []
    assert run(subagent(None, parent=None), config(ON)) == []  # a root: depth 0
    # a depth without a parent is a root's (F6's wire rule): depth 0
    assert run(subagent(9, parent=None), config(ON)) == []


def test_a_parent_without_a_depth_is_depth_one() -> None:
    assert run(subagent(None), config({"enabled": True, "maxDepth": 0}))[0].detector == "delegation_depth"
    assert run(subagent(None), config({"enabled": True, "maxDepth": 1})) == []


def test_off_by_default_and_when_disabled() -> None:
    assert run(subagent(10), config()) == []
    assert run(subagent(10), config({"enabled": False, "maxDepth": 0})) == []


def test_the_chain_of_a_run_is_fixed_by_its_first_event() -> None:
    trace = subagent(None, parent=None)
    later = trace.events[2]
    assert isinstance(later, ToolCall)
    trace.events[2] = msgspec.structs.replace(later, parent_run_id="p", depth=8)
    assert run(trace, config(ON)) == []


def test_the_depth_survives_the_state_bytes_and_old_states_are_roots() -> None:
    engine = Engine(config(ON))
    for event in subagent(5, calls=1).events:
        engine.process(event)
    state = engine.states["child"]
    again = RunState.from_bytes(state.to_bytes())
    assert (again.depth, again) == (5, state)


def test_the_section_is_global_only_and_checked_with_paths() -> None:
    with pytest.raises(ConfigError) as caught:
        config({"maxDepth": -1, "chainWarningThreshold": 30, "chainCriticalThreshold": 20, "bogus": 1})
    text = str(caught.value)
    assert "loopwatch.detectors.delegation.maxDepth" in text
    assert "loopwatch.detectors.delegation.bogus" in text
    with pytest.raises(ConfigError) as per_agent:
        config(agents=[{"id": "coder", "loopwatch": {"detectors": {"delegation": {"enabled": True}}}}])
    assert "fleet-wide" in str(per_agent.value)
