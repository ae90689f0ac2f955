"""F6b ``chain_runaway`` and F6c ``chain_repeat``: the pure aggregators, their blocks, their
expiry, and the same alerts from the watch, ``replay`` and the embedded runtime."""

from __future__ import annotations

import asyncio
import itertools
import json
from typing import Any

import msgspec

from loopwatch.config import FleetConfig, parse_config_text
from loopwatch.config.fleet_rules import fleet_rules
from loopwatch.detectors.engine import Engine
from loopwatch.detectors.events import Abort, Event, Output, ToolCall, ToolResult, Verdict
from loopwatch.detectors.fleet.alerts import FleetAlert, decode_alert, encode_alert
from loopwatch.detectors.fleet.chain_blocks import ChainBlocks
from loopwatch.detectors.fleet.chains import chain_key
from loopwatch.detectors.fleet.facts import facts_of_outputs
from loopwatch.detectors.fleet.watch import FleetWatch, WatchHooks
from loopwatch.detectors.hashing import digester_for
from loopwatch.detectors.stable_json import from_python
from loopwatch.streams.embedded.runtime import EmbeddedRuntime
from loopwatch.streams.history.replay import replay

T0 = 1_780_000_000_000
SEC = 1000
DIGESTER = digester_for("xxh3")
_ids = itertools.count()


def config(**delegation: Any) -> FleetConfig:
    document: dict[str, Any] = {"tools": {"loopDetection": {"enabled": True}}}
    if delegation:
        document["loopwatch"] = {"detectors": {"delegation": delegation}}
    return parse_config_text(json.dumps(document))


def chain_fields(run: str, root: str | None, depth: int = 1) -> dict[str, Any]:
    if root is None or run == root:
        return {}
    return {"parent_run_id": root, "root_run_id": root, "depth": depth}


def call(
    run: str, ts: int, tool: str = "read", args: Any = None, root: str | None = None, agent: str = "a"
) -> ToolCall:
    return ToolCall(
        event_id=f"{run}-c{next(_ids)}",
        run_id=run,
        agent_id=agent,
        ts=ts,
        tool=tool,
        params=from_python(args if args is not None else {"path": f"/{run}/{ts}"}),
        **chain_fields(run, root),
    )


def result_of(c: ToolCall, text: str = "same text") -> ToolResult:
    return ToolResult(
        event_id=c.event_id.replace("-c", "-r"),
        run_id=c.run_id,
        agent_id=c.agent_id,
        ts=(c.ts or 0) + 10,
        tool=c.tool,
        params=c.params,
        result=from_python({"content": [{"type": "text", "text": text}]}),
    )


def both(
    run: str, ts: int, root: str | None, args: Any = None, text: str = "same text", tool: str = "read"
) -> list[Event]:
    c = call(run, ts, tool, args, root)
    return [c, result_of(c, text)]


def fan_out(root: str, runs: int, start: int = T0, step: int = SEC, agents: int = 1) -> list[Event]:
    """The root and ``runs - 1`` subagents, each making one distinct call and getting its result."""
    events: list[Event] = []
    for n in range(runs):
        run = root if n == 0 else f"{root}/sub-{n}"
        c = call(run, start + n * step, args={"task": n}, root=root, agent=f"agent-{n % agents}")
        events += [c, result_of(c, f"done {n}")]
    return events


def sequential(events: list[Event], fleet: FleetConfig) -> tuple[list[Output], list[FleetAlert]]:
    """The run engine and the watch, one event after the other (what ``replay`` does)."""
    watch = FleetWatch(fleet_rules(fleet.global_rules), DIGESTER)
    engine = Engine(fleet, fleet=WatchHooks(watch))
    outputs: list[Output] = []
    for event in events:
        assert event.ts is not None
        assert event.run_id is not None
        stepped = engine.step(event, event.ts)
        outputs += stepped.outputs
        state = engine.states.get(event.run_id)
        root = chain_key(state) if state is not None and stepped.kind == "applied" else None
        watch.observe(event, event.run_id, event.ts, stepped.prepared, stepped.outputs, root)
    return outputs, watch.alerts


def alerts_of(events: list[Event], fleet: FleetConfig) -> list[FleetAlert]:
    return sequential(events, fleet)[1]


def blocks(outputs: list[Output], detector: str) -> list[Verdict]:
    return [o for o in outputs if isinstance(o, Verdict) and o.detector == detector]


ON = {"enabled": True, "maxRuns": 4, "minRuns": 3, "chainWarningThreshold": 5, "chainCriticalThreshold": 8}


# -- F6b: runaway ------------------------------------------------------------------------------


def test_runaway_alerts_at_exactly_max_runs() -> None:
    events = fan_out("root-1", 4, agents=2)
    (alert,) = alerts_of(events, config(**ON))
    assert alert.kind == "chain_runaway"
    assert alert.subject == "chain:root-1"
    assert alert.alert_id == "chain_runaway:chain:root-1:4"
    assert alert.runs == 4
    assert alert.agents == 2
    assert alert.sample_run_ids == ["root-1", "root-1/sub-1", "root-1/sub-2", "root-1/sub-3"]
    assert alert.since_ts == T0
    assert alert.ts == T0 + 3 * SEC  # the event that made the count reach the threshold
    assert alert.message == (
        "Delegation chain root-1 has started 4 runs of 2 agents; it is likely recursing or fanning "
        "out without end."
    )
    assert alert.tool is None
    assert alert.count is None
    assert alert.agent_id is None
    assert decode_alert(encode_alert(alert)) == alert
    wire = json.loads(encode_alert(alert))
    assert wire["tool"] is None
    assert wire["count"] is None


def test_runaway_at_max_runs_minus_one_does_not_alert() -> None:
    assert alerts_of(fan_out("root-1", 3), config(**ON)) == []
    # however many events those three runs send
    more = [e for n in range(20) for e in both("root-1/sub-2", T0 + 10 * SEC + n, "root-1", {"n": n})]
    assert alerts_of(fan_out("root-1", 3) + more, config(**ON)) == []


def test_runaway_alerts_again_at_two_and_four_times_max_runs() -> None:
    alerts = alerts_of(fan_out("root-1", 17), config(**ON))
    assert [(a.runs, a.alert_id) for a in alerts] == [
        (4, "chain_runaway:chain:root-1:4"),
        (8, "chain_runaway:chain:root-1:8"),
        (16, "chain_runaway:chain:root-1:16"),
    ]
    assert [a.ts for a in alerts] == [T0 + 3 * SEC, T0 + 7 * SEC, T0 + 15 * SEC]
    assert all(a.sample_run_ids[0] == "root-1" for a in alerts)
    assert len(alerts[2].sample_run_ids) == 5


def test_the_sample_runs_start_with_the_root_and_are_in_first_seen_order() -> None:
    # a subagent reports before its root does (the root's first event is later): the root still leads
    events = both("root-1/sub-9", T0, "root-1") + fan_out("root-1", 4, start=T0 + SEC)
    (alert,) = alerts_of(events, config(**ON))
    assert alert.sample_run_ids == ["root-1", "root-1/sub-9", "root-1/sub-1", "root-1/sub-2"]


def test_chains_are_counted_apart_and_runs_without_a_parent_are_roots() -> None:
    events = fan_out("root-1", 3) + fan_out("root-2", 3, start=T0 + 500)
    # a run naming a root but no parent is a root of its own (F6's wire rule)
    lone = call("lone", T0, root=None)
    lone = msgspec.structs.replace(lone, root_run_id="root-1", depth=2)
    assert alerts_of([*events, lone], config(**ON)) == []


def test_a_missing_root_defaults_to_the_parent() -> None:
    events = fan_out("p", 3)
    child = msgspec.structs.replace(call("p/child", T0 + 9 * SEC), parent_run_id="p")  # no root_run_id
    (alert,) = alerts_of([*events, child], config(**ON))
    assert alert.subject == "chain:p"


def test_chain_fields_of_later_events_are_ignored() -> None:
    first = call("solo", T0)  # a root
    later = msgspec.structs.replace(call("solo", T0 + SEC), parent_run_id="root-1", root_run_id="root-1")
    # root-1 has three runs; "solo" claims it later: still a root of its own chain, not a fourth run
    assert alerts_of([*fan_out("root-1", 3), first, later], config(**ON)) == []


# -- F6c: repeated work -------------------------------------------------------------------------


def reads(
    runs: list[str], per_run: int, start: int = T0, root: str = "root-1", args: Any = None
) -> list[Event]:
    """Each run reads the same file ``per_run`` times and gets the same text."""
    events: list[Event] = []
    ts = start
    for run in runs:
        for _ in range(per_run):
            events += both(run, ts, root, args if args is not None else {"path": "/spec.md"})
            ts += SEC
    return events


def test_repeat_warns_at_the_warning_threshold_and_again_at_the_critical() -> None:
    events = reads(["root-1", "root-1/a", "root-1/b"], 1) + reads(["root-1/b"], 7, start=T0 + 10 * SEC)
    alerts = alerts_of(events, config(**ON))
    args_hash = _prepared(call("x", T0, args={"path": "/spec.md"})).args_hash
    assert args_hash.startswith("read:")
    h12 = args_hash.removeprefix("read:")[:12]
    subject = f"chain:root-1:read:{h12}"
    assert [(a.kind, a.alert_id, a.count, a.runs) for a in alerts] == [
        ("chain_repeat", f"chain_repeat:chain:root-1:{args_hash}:5", 5, 3),
        ("chain_repeat", f"chain_repeat:chain:root-1:{args_hash}:8", 8, 3),
    ]
    warning = alerts[0]
    assert warning.subject == subject
    assert warning.args_hash == args_hash
    assert warning.tool == "read"
    assert warning.sample_run_ids == ["root-1", "root-1/a", "root-1/b"]
    assert warning.since_ts == T0 + 10
    assert warning.message == (
        "5 calls of read with the same arguments and the same result across 3 runs of delegation "
        "chain root-1: the agents are repeating each other's work."
    )
    seven = events[: 2 * 7]  # seven results: one short of the critical
    assert [a.count for a in alerts_of(seven, config(**ON))] == [5]


def test_repeats_inside_fewer_than_min_runs_runs_never_alert() -> None:
    events = reads(["root-1/a", "root-1/b"], 40)
    assert alerts_of(events, config(**ON)) == []


def test_a_third_run_past_both_thresholds_gives_both_alerts_at_once() -> None:
    events = reads(["root-1/a", "root-1/b"], 6) + reads(["root-1/c"], 1, start=T0 + 60 * SEC)
    alerts = alerts_of(events, config(**ON))
    assert [(a.alert_id.rsplit(":", 1)[1], a.count, a.runs) for a in alerts] == [("5", 13, 3), ("8", 13, 3)]


def test_only_the_same_arguments_with_the_same_result_add_up() -> None:
    runs = ["root-1", "root-1/a", "root-1/b"]
    other_args = [
        e for n, run in enumerate(runs * 3) for e in both(run, T0 + n * SEC, "root-1", {"path": f"/{n}"})
    ]
    texts = [e for n, run in enumerate(runs * 3) for e in both(run, T0 + n * SEC, "root-1", text=f"v{n}")]
    assert alerts_of(other_args, config(**ON)) == []
    assert alerts_of(texts, config(**ON)) == []


def test_a_result_applied_twice_counts_once() -> None:
    events = reads(["root-1", "root-1/a", "root-1/b"], 1)
    events += events[-2:] * 5  # the same call and result again (a republished event)
    assert alerts_of(events, config(**ON)) == []


def test_errors_repeated_across_the_chain_count_too() -> None:
    events: list[Event] = []
    for n, run in enumerate(["root-1", "root-1/a", "root-1/b", "root-1/a", "root-1/b"]):
        c = call(run, T0 + n * SEC, "exec", {"cmd": "make"}, "root-1")
        events += [c, msgspec.structs.replace(result_of(c), result=msgspec.UNSET, error="make: no rule")]
    assert [a.count for a in alerts_of(events, config(**ON))] == [5]


# -- expiry -------------------------------------------------------------------------------------


def test_a_chain_quiet_for_its_ttl_starts_afresh() -> None:
    ttl = {**ON, "chainTtlS": 60}
    first = fan_out("root-1", 3)  # its last event: the result at T0 + 2 s + 10 ms
    quiet = T0 + 2 * SEC + 10 + 60 * SEC
    late = fan_out("root-1", 2, start=quiet)  # root-1 and sub-1 again
    later = both("root-1/sub-7", quiet + 5 * SEC, "root-1")
    assert alerts_of(first + late + later, config(**ttl)) == []  # 3 runs, then 3 runs: never 4
    just_in_time = fan_out("root-1", 2, start=quiet - 1)
    (alert,) = alerts_of(first + just_in_time + later, config(**ttl))
    assert alert.runs == 4


def test_repeated_work_is_forgotten_with_its_chain() -> None:
    ttl = {**ON, "chainTtlS": 30}
    before = reads(["root-1", "root-1/a"], 2)
    after = reads(["root-1/b"], 3, start=T0 + 3 * SEC + 30 * SEC + 10)
    assert alerts_of(before + after, config(**ttl)) == []
    assert [
        a.runs for a in alerts_of(before + reads(["root-1/b"], 3, start=T0 + 4 * SEC), config(**ttl))
    ] == [3]


def test_the_watch_forgets_expired_chains() -> None:
    w = FleetWatch(fleet_rules(config(**{**ON, "chainTtlS": 1}).global_rules), DIGESTER)
    for n in range(5000):
        c = call(f"r{n}", T0 + n * 2 * SEC)
        w.observe(c, f"r{n}", c.ts or 0, None, [], None)  # not applied: no facts
        w.observe(c, f"r{n}", c.ts or 0, _prepared(c), [], f"r{n}")
    assert len(w.chains) < 4096


def _prepared(event: ToolCall | ToolResult) -> Any:
    from loopwatch.detectors.step import prepare

    return prepare(event, DIGESTER, frozenset())


# -- the rule off -------------------------------------------------------------------------------


def test_off_by_default_and_when_disabled_nothing_happens() -> None:
    events = fan_out("root-1", 20) + reads(["root-1", "root-1/a", "root-1/b"], 10)
    plain = sequential(events, config())
    assert plain[1] == []
    off = sequential(events, config(**{**ON, "enabled": False, "block": True}))
    assert off == plain
    w = FleetWatch(fleet_rules(config(**{**ON, "enabled": False}).global_rules), DIGESTER)
    for event in events:
        assert isinstance(event, (ToolCall, ToolResult))
        assert event.ts is not None
        w.observe(event, event.run_id or "", event.ts, _prepared(event), [], "root-1")
    assert w.chains == {}


# -- blocks -------------------------------------------------------------------------------------


def test_runaway_blocks_only_runs_that_began_after_the_alert_and_never_abort_them() -> None:
    events = fan_out("root-1", 4)
    # after the alert: an older run goes on; a new subagent calls again and again
    events += both("root-1/sub-1", T0 + 10 * SEC, "root-1", {"more": 1})
    events += [e for n in range(6) for e in both("root-1/late", T0 + 20 * SEC + n * SEC, "root-1", {"n": n})]
    outputs, alerts = sequential(events, config(**ON, block=True))
    assert [a.runs for a in alerts] == [4]
    runaway = blocks(outputs, "chain_runaway")
    assert {v.run_id for v in runaway} == {"root-1/late"}
    assert len(runaway) == 6  # every call of the new run
    assert all(v.level == "critical" and v.action == "block" and v.enforced for v in runaway)
    assert runaway[0].count == 4
    assert runaway[0].message == (
        "CRITICAL: this delegation chain has started 4 runs; no new agent of it may act. "
        "Report back to the agent that started you."
    )
    assert not [o for o in outputs if isinstance(o, Abort)]  # the fleet's blocks never escalate
    # without block: the alert, and no verdict at all
    assert sequential(events, config(**ON))[0] == []


def test_runaway_blocks_follow_the_latest_alert_count() -> None:
    events = fan_out("root-1", 8)
    events += both("root-1/late", T0 + 30 * SEC, "root-1")
    outputs, alerts = sequential(events, config(**ON, block=True))
    assert [a.runs for a in alerts] == [4, 8]
    counted_late = blocks(outputs, "chain_runaway")
    # sub-4 … sub-7 began after the first alert: blocked (count 4 until the second alert)
    assert [(v.run_id, v.count) for v in counted_late] == [
        ("root-1/sub-4", 4),
        ("root-1/sub-5", 4),
        ("root-1/sub-6", 4),
        ("root-1/sub-7", 4),
        ("root-1/late", 8),
    ]


def test_repeat_blocks_from_the_critical_alert_on_every_run_of_the_chain() -> None:
    events = reads(["root-1", "root-1/a", "root-1/b"], 1) + reads(["root-1/b"], 4, start=T0 + 10 * SEC)
    warned = sequential(events, config(**ON, block=True))
    assert [a.count for a in warned[1]] == [5]
    assert warned[0] == []  # a warning alert blocks nothing
    events += reads(["root-1/b"], 1, start=T0 + 20 * SEC)  # the critical at the eighth result
    events += reads(["root-1/a", "root-1/new"], 1, start=T0 + 40 * SEC)  # then two more attempts
    events += both("root-1/a", T0 + 50 * SEC, "root-1", {"path": "/other.md"})  # other arguments: free
    events += reads(["elsewhere"], 1, start=T0 + 60 * SEC, root="elsewhere")  # another chain: free
    outputs, alerts = sequential(events, config(**ON, block=True))
    assert [a.count for a in alerts if a.kind == "chain_repeat"] == [5, 8]
    repeat = blocks(outputs, "chain_repeat")
    assert [v.run_id for v in repeat] == ["root-1/a", "root-1/new"]
    assert repeat[0].count == 3
    assert repeat[0].message == (
        "CRITICAL: 3 agents of this delegation chain already called read with these arguments and got "
        "the same result. Use that result instead of calling again."
    )
    assert repeat[0].warning_key.startswith("chain_repeat:read:")
    # root-1/new is the chain's fourth run: the runaway alert comes with its first call
    assert [a.kind for a in alerts][-1] == "chain_runaway"
    assert len(outputs) == 2
    assert not [o for o in outputs if isinstance(o, Abort)]


def test_blocks_end_when_the_chain_expires() -> None:
    rule = {**ON, "block": True, "chainTtlS": 60}
    events = fan_out("root-1", 4)
    events += both("root-1/late", T0 + 3 * SEC + 59 * SEC, "root-1", {"x": 1})
    # the chain's last event: late's result, 10 ms after its call; a full minute later it is over
    events += both("root-1/later", T0 + 3 * SEC + 59 * SEC + 10 + 60 * SEC, "root-1", {"x": 2})
    outputs, _ = sequential(events, config(**rule))
    assert [v.run_id for v in blocks(outputs, "chain_runaway")] == ["root-1/late"]


def test_observe_only_blocks_are_not_enforced() -> None:
    document = {
        "tools": {"loopDetection": {"enabled": True}},
        "loopwatch": {"observeOnly": True, "detectors": {"delegation": {**ON, "block": True}}},
    }
    events = fan_out("root-1", 4) + both("root-1/late", T0 + 9 * SEC, "root-1")
    outputs, _ = sequential(events, parse_config_text(json.dumps(document)))
    (verdict,) = blocks(outputs, "chain_runaway")
    assert verdict.enforced is False


def test_depth_criticals_still_escalate_beside_chain_blocks() -> None:
    deep = [call("root-1/deep", T0 + 20 * SEC + n, args={"n": n}, root="root-1") for n in range(3)]
    deep[0] = msgspec.structs.replace(deep[0], depth=5)
    outputs, _ = sequential(fan_out("root-1", 4) + list(deep), config(**ON, block=True, maxDepth=3))
    assert [o.detector for o in outputs if o.run_id == "root-1/deep"] == [
        "chain_runaway",
        "delegation_depth",
        "chain_runaway",
        "delegation_depth",
        "tool_loop_recovery_exhausted",  # the second depth critical aborts (E1); the chain's do not count
        "chain_runaway",
        "delegation_depth",
    ]


def test_chain_blocks_are_no_loops_of_an_agent() -> None:
    events = fan_out("root-1", 4) + both("root-1/late", T0 + 9 * SEC, "root-1")
    outputs, _ = sequential(events, config(**ON, block=True))
    assert blocks(outputs, "chain_runaway")
    assert facts_of_outputs(outputs, "root-1/late", T0) == []


def test_a_board_fed_only_with_the_alerts_blocks_as_the_watch_does() -> None:
    events = reads(["root-1", "root-1/a", "root-1/b"], 3)
    events += fan_out("root-1", 4, start=T0 + 20 * SEC)
    _, alerts = sequential(events, config(**ON))
    board = ChainBlocks()
    for alert in alerts:
        board.add(decode_alert(encode_alert(alert)))  # as a worker's follower reads them
    rule = fleet_rules(config(**ON, block=True).global_rules).delegation
    again = call("root-1/a", T0 + 40 * SEC, args={"path": "/spec.md"}, root="root-1")
    args_hash = _prepared(again).args_hash
    found = board.block("root-1/a", "root-1", T0, again, args_hash, T0 + 40 * SEC, rule, False)
    assert found is not None
    assert found.detector == "chain_repeat"
    fresh = call("root-1/z", T0 + 41 * SEC, root="root-1")
    found = board.block("root-1/z", "root-1", T0 + 41 * SEC, fresh, "read:x", T0 + 41 * SEC, rule, False)
    assert found is not None
    assert found.detector == "chain_runaway"
    # a root holding colons, as a session scope does
    colon = FleetAlert(
        alert_id="chain_repeat:chain:session:s:1:read:abc:8",
        kind="chain_repeat",
        subject="chain:session:s:1:read:abcdef012345",
        tool="read",
        runs=3,
        count=8,
        sample_run_ids=[],
        since_ts=T0,
        ts=T0,
        message="m",
    )
    board.add(colon)
    probe = call("session:s:1/sub", T0 + 50 * SEC, args={"a": 1})
    found = board.block("x", "session:s:1", None, probe, "read:abcdef012345678", T0 + 50 * SEC, rule, False)
    assert found is not None


# -- every runtime gives the same alerts --------------------------------------------------------


def busy_fleet() -> list[Event]:
    """Two chains and some roots alone, interleaved in time, over a few minutes."""
    events = fan_out("root-1", 9, step=7 * SEC, agents=3) + fan_out(
        "root-2", 5, start=T0 + 3 * SEC, step=11 * SEC
    )
    events += reads(["root-2", "root-2/sub-1", "root-2/sub-2"], 3, start=T0 + 5 * SEC, root="root-2")
    events += reads(["alone"], 12, start=T0 + 2 * SEC, root="alone")
    return sorted(events, key=lambda e: e.ts or 0)


def test_replay_and_the_embedded_runtime_give_the_same_alert_ids() -> None:
    fleet = config(**ON, block=True)
    events = busy_fleet()
    _, watched = sequential(events, fleet)
    replayed: list[FleetAlert] = []
    replay(events, fleet, alerts=replayed)

    async def embedded(workers: int) -> list[FleetAlert]:
        async with EmbeddedRuntime(fleet, workers=workers) as runtime:
            async for _ in runtime.run(events):
                pass
            return runtime.alerts

    ids = [a.alert_id for a in watched]
    assert sorted({a.kind for a in watched}) == ["chain_repeat", "chain_runaway"]
    assert [a.alert_id for a in replayed] == ids
    for workers in (1, 4):
        assert [a.alert_id for a in asyncio.run(embedded(workers))] == ids
    assert replayed == watched  # and the same alerts, field by field
