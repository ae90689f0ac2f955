"""Delegation chains on the dashboard and in /metrics (spec BEYOND-OPENCLAW F6): the tree of a
chain's runs, its route, its chain alerts, and the chain counters (pure; no server)."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any, cast

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from loopwatch.config import FleetConfig, parse_config_text
from loopwatch.detectors.engine import Engine
from loopwatch.detectors.events import Event, Output, ToolCall, Verdict
from loopwatch.detectors.fleet.alerts import FleetAlert
from loopwatch.streams.embedded.runtime import EmbeddedRuntime
from loopwatch.streams.fleet_view.alert_board import AlertBoard, chain_root
from loopwatch.streams.fleet_view.chain_tree import (
    CYCLE,
    PARENT_NOT_SEEN,
    ROOT_NOT_SEEN,
    ChainRow,
    chain_layout,
)
from loopwatch.streams.fleet_view.dashboard import WEB, Dashboard
from loopwatch.streams.fleet_view.metrics import WorkerMetrics
from loopwatch.streams.fleet_view.run_activity import RunActivity
from loopwatch.streams.fleet_view.view import FleetView
from tests.helpers import Trace, text_result

NOW_S = 1_800_000_000.0
NOW_MS = int(NOW_S * 1000)
#: delegation on, runs deeper than 1 blocked (and aborted at their second critical)
DELEGATION = parse_config_text(
    json.dumps(
        {
            "tools": {"loopDetection": {"enabled": True}},
            "loopwatch": {"detectors": {"delegation": {"enabled": True, "maxDepth": 1}}},
        }
    )
)


def delegated(
    run_id: str,
    agent: str = "a",
    parent: str | None = None,
    root: str | None = None,
    depth: int | None = None,
    calls: int = 2,
    ts: int = 0,
) -> list[Event]:
    """A run of ``calls`` healthy calls whose first event names its chain (none: a root)."""
    trace = Trace(run_id, agent_id=agent)
    for n in range(calls):
        trace.call("read", {"path": f"/{run_id}/{n}"}, f"c{n}", ts=ts + 2 * n)
        trace.result(
            "read", {"path": f"/{run_id}/{n}"}, text_result(str(n)), call_id=f"c{n}", ts=ts + 2 * n + 1
        )
    chain: dict[str, Any] = {}
    if parent is not None:
        chain["parent_run_id"] = parent
    if root is not None:
        chain["root_run_id"] = root
    if depth is not None:
        chain["depth"] = depth
    trace.events[0] = msgspec.structs.replace(trace.events[0], **chain)
    return trace.events


def feed(
    view: FleetView | RunActivity, events: list[Event], config: FleetConfig = DELEGATION
) -> list[Output]:
    engine = Engine(config)
    outputs: list[Output] = []
    for event in events:
        ts = event.ts if event.ts is not None else 0
        view.event(event, ts)
        for output in engine.process(event):
            view.output(output, ts)
            outputs.append(output)
    return outputs


def three_levels() -> list[Event]:
    """root (planner) -> child (coder) -> grandchild (tester, depth 2: blocked, then aborted);
    and a second child started later."""
    return [
        *delegated("root", "planner", ts=1000),
        *delegated("child", "coder", parent="root", root="root", depth=1, ts=2000),
        *delegated("grandchild", "tester", parent="child", root="root", depth=2, ts=3000),
        *delegated("child-2", "coder", parent="root", root="root", depth=1, ts=4000),
    ]


def get(dashboard: Dashboard, path: str, **query: str) -> tuple[int, Any]:
    answer = dashboard.respond(path, query)
    assert answer.content_type == "application/json"
    return answer.status, json.loads(answer.body)


def alert(kind: str, subject: str, ts: int, tool: str | None = None, runs: int = 50) -> FleetAlert:
    return FleetAlert(
        alert_id=f"{kind}:{subject}:{runs}",
        kind=cast("Any", kind),
        subject=subject,
        tool=tool,
        runs=runs,
        agents=2,
        sample_run_ids=["root", "child"],
        since_ts=ts,
        ts=ts,
        message=f"{kind} message",
    )


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


# -- the tree ----------------------------------------------------------------------------------


def shape(rows: list[ChainRow]) -> list[tuple[str, int, str | None]]:
    return [(row.run, row.level, row.note) for row in rows]


def test_runs_are_laid_out_depth_first_siblings_oldest_first() -> None:
    parents = {"R": None, "b": "R", "a": "R", "b1": "b", "a2": "a", "a1": "a", "c": "R"}
    first = {"R": 0, "b": 10, "a": 10, "b1": 11, "a2": 12, "a1": 12, "c": 5}
    rows = chain_layout("R", parents, first)
    # c first (seen first), then a before b (same time: by id), each with its subtree
    assert shape(rows) == [
        ("R", 0, None),
        ("c", 1, None),
        ("a", 1, None),
        ("a1", 2, None),
        ("a2", 2, None),
        ("b", 1, None),
        ("b1", 2, None),
    ]
    assert [row.children for row in rows] == [3, 0, 2, 0, 0, 1, 0]


def test_an_unseen_root_and_parents_never_seen() -> None:
    # the root itself is not known; "lost" names a parent nobody saw
    rows = chain_layout("R", {"a": "R", "a1": "a", "lost": "gone", "lost1": "lost"}, {"lost": 0, "a": 1})
    assert shape(rows) == [
        ("R", 0, ROOT_NOT_SEEN),
        ("a", 1, None),
        ("a1", 2, None),
        ("lost", 1, PARENT_NOT_SEEN),
        ("lost1", 2, None),
    ]
    assert rows[0].children == 2


def test_circles_of_parents_and_self_parents_are_drawn_once_and_end() -> None:
    parents = {"R": None, "p": "q", "q": "p", "tail": "p", "self": "self", "root-child": "R"}
    first = {"p": 5, "q": 4, "tail": 0, "self": 1, "root-child": 9}
    rows = chain_layout("R", parents, first)
    assert shape(rows) == [
        ("R", 0, None),
        ("root-child", 1, None),
        ("self", 1, CYCLE),  # a run that is its own parent: a circle of one, first seen
        ("q", 1, CYCLE),  # the circle p <-> q starts at its first seen run
        ("p", 2, None),
        ("tail", 3, None),
    ]
    # the root naming a parent (here: itself, or a run of the chain) is still drawn first
    assert shape(chain_layout("R", {"R": "x", "x": "R"}, {})) == [("R", 0, None), ("x", 1, None)]


def test_a_chain_thousands_deep_or_one_long_circle_does_not_recurse() -> None:
    deep = {f"r{n}": (f"r{n - 1}" if n else "R") for n in range(20_000)}
    rows = chain_layout("R", {"R": None, **deep}, {})
    assert len(rows) == 20_001
    assert rows[-1] == ChainRow("r19999", 20_000, None, 0)
    circle = {f"r{n}": f"r{(n + 1) % 20_000}" for n in range(20_000)}
    rows = chain_layout("R", circle, {})
    assert len(rows) == 20_001
    assert (rows[1].run, rows[1].note) == ("r0", CYCLE)


@settings(max_examples=300, deadline=None, database=None)
@given(
    links=st.dictionaries(
        st.sampled_from([f"r{n}" for n in range(8)] + ["R"]),
        st.none() | st.sampled_from([f"r{n}" for n in range(10)] + ["R"]),
        max_size=9,
    ),
    times=st.lists(st.integers(0, 3), min_size=10, max_size=10),
)
def test_any_links_give_every_run_once_under_its_parent(
    links: dict[str, str | None], times: list[int]
) -> None:
    first = {f"r{n}": t for n, t in enumerate(times[:9])}
    rows = chain_layout("R", links, first)
    assert sorted(row.run for row in rows) == sorted({"R", *links})
    assert rows[0].run == "R"
    assert all(row.level >= 1 for row in rows[1:])
    for index, row in enumerate(rows[1:], start=1):
        # the row it hangs from: the nearest earlier row one level up
        above = next(r for r in reversed(rows[:index]) if r.level == row.level - 1)
        if row.note is None:
            assert links.get(row.run) == above.run
        else:
            assert above.run == "R"
    for row in rows:
        below = [r for r in rows if r.level == row.level + 1]
        assert row.children <= len(below)


# -- the view --------------------------------------------------------------------------------


def test_the_chain_of_three_levels_with_verdicts_and_abort() -> None:
    view = FleetView("test")
    outputs = feed(view, three_levels())
    status, chain = get(Dashboard(view, clock=lambda: NOW_S), "/fleet/chain", root="root")
    assert status == 200
    assert [(r["run"], r["level"], r["depth"], r["agent_id"]) for r in chain["rows"]] == [
        ("root", 0, 0, "planner"),
        ("child", 1, 1, "coder"),
        ("grandchild", 2, 2, "tester"),
        ("child-2", 1, 1, "coder"),
    ]
    deep = [o for o in outputs if o.run_id == "grandchild"]
    assert deep  # the grandchild is deeper than maxDepth 1
    assert all(o.run_id == "grandchild" for o in outputs)
    rows = {r["run"]: r for r in chain["rows"]}
    assert [r["run"] for r in chain["rows"] if r["aborted"]] == ["grandchild"]
    blocks = [o for o in deep if isinstance(o, Verdict)]
    fired = {(f["detector"], f["action"], f["level"]): f for f in rows["grandchild"]["fired"]}
    assert fired[("delegation_depth", "block", "critical")]["verdicts"] == len(blocks)
    assert fired[("delegation_depth", "block", "critical")]["count"] == 2  # the depth
    assert sum(f["verdicts"] for f in rows["grandchild"]["fired"]) == len(deep)
    assert rows["child"]["fired"] == []
    assert chain["runs"] == 4
    assert chain["agents"] == 3
    assert chain["max_depth"] == 2
    assert chain["aborted_runs"] == 1
    assert (chain["shown"], chain["hidden"], chain["alerts"]) == (4, 0, [])
    # every run page says how many runs of its chain are known, and where it hangs
    for scope in ("root", "child", "grandchild"):
        status, run = get(Dashboard(view), "/fleet/run", id=scope)
        assert run["chain_runs"] == 4
        assert run["root_run_id"] == "root"
    status, run = get(Dashboard(view), "/fleet/run", id="grandchild")
    assert (run["parent_run_id"], run["depth"]) == ("child", 2)


def test_the_first_event_fixes_the_chain_even_when_a_verdict_came_first() -> None:
    activity = RunActivity()
    events = delegated("late", parent="p1", root="R", depth=1)
    # a later event that names another chain is ignored
    events.append(
        msgspec.structs.replace(delegated("late", calls=1, ts=50)[0], parent_run_id="p2", root_run_id="Q")
    )
    verdict = Verdict(
        verdict_id="v",
        run_id="late",
        agent_id="a",
        session_id=None,
        tool_call_id=None,
        trigger_event_id="e",
        level="warning",
        action="warn",
        detector="generic_repeat",
        count=10,
        message="m",
        warning_key="k",
        paired_tool=None,
        tool="read",
        ts=None,
    )
    activity.output(verdict, 0)  # the verdicts topic was read before the events topic
    for event in events:
        activity.event(event, 1)
    rows = activity.chain("R")["rows"]
    assert [(r["run"], r["note"]) for r in rows] == [("R", ROOT_NOT_SEEN), ("late", PARENT_NOT_SEEN)]
    assert rows[1]["parent_run_id"] == "p1"
    assert activity.chain("Q")["runs"] == 0


def test_rows_are_capped_and_the_hidden_ones_counted() -> None:
    view = FleetView("test")
    events = delegated("R", calls=1)
    for n in range(30):
        events += delegated(f"kid-{n:02d}", parent="R", depth=1, calls=1, ts=10 + n)
    feed(view, events)
    dashboard = Dashboard(view, clock=lambda: NOW_S)
    status, chain = get(dashboard, "/fleet/chain", root="R", limit="5")
    assert status == 200
    assert [r["run"] for r in chain["rows"]] == ["R", "kid-00", "kid-01", "kid-02", "kid-03"]
    assert (chain["shown"], chain["hidden"], chain["runs"]) == (5, 26, 31)
    assert get(dashboard, "/fleet/chain", root="R")[1]["shown"] == 31  # within the default cap


def test_runs_the_view_forgets_leave_their_chain() -> None:
    activity = RunActivity(max_runs=3)
    feed(activity, [*delegated("R"), *delegated("c1", parent="R"), *delegated("c2", parent="c1", root="R")])
    assert [r["run"] for r in activity.chain("R")["rows"]] == ["R", "c1", "c2"]
    feed(activity, delegated("other"))  # R, the least recently active, is dropped
    rows = activity.chain("R")["rows"]
    assert [(r["run"], r["note"]) for r in rows] == [("R", ROOT_NOT_SEEN), ("c1", None), ("c2", None)]
    feed(activity, [*delegated("other-2"), *delegated("other-3")])
    assert activity.chain("R")["runs"] == 0
    assert activity.chains == {}


def test_chain_route_errors_say_what_is_wrong() -> None:
    view = FleetView("test")
    feed(view, three_levels())
    dashboard = Dashboard(view, clock=lambda: NOW_S)
    status, body = get(dashboard, "/fleet/chain")
    assert (status, body) == (400, {"error": "query parameter root: the chain's root run id is required"})
    for bad in ("0", "x", "2001", "-1"):
        status, body = get(dashboard, "/fleet/chain", root="root", limit=bad)
        assert status == 400
        assert "limit" in body["error"]
    status, body = get(dashboard, "/fleet/chain", root="nope")
    assert status == 404
    assert "'nope'" in body["error"]


HOSTILE = [
    '<img src=x onerror="window.__pwned=1">',
    "</script><script>window.__pwned=1</script>",
    "a&b=c#d?e'f\"g",
    "line\u2028sep\u2029end",
    "session:<b>x</b>",
]


def test_hostile_run_ids_come_back_as_data_and_the_page_never_parses_them_as_html() -> None:
    view = FleetView("test")
    events = delegated(HOSTILE[0], agent="<i>agent</i>")
    for n, run in enumerate(HOSTILE[1:]):
        events += delegated(run, agent=f"<u>{n}</u>", parent=HOSTILE[0], depth=1, ts=10 + n)
    feed(view, events)
    answer = Dashboard(view, clock=lambda: NOW_S).respond("/fleet/chain", {"root": HOSTILE[0]})
    assert answer.content_type == "application/json"  # never text/html: a browser does not render it
    chain = json.loads(answer.body)
    assert [r["run"] for r in chain["rows"]] == HOSTILE
    assert chain["rows"][0]["agent_id"] == "<i>agent</i>"
    # the page puts agent texts in the DOM as text only: nothing builds HTML from a string
    script = (WEB / "app.js").read_text()
    assert not re.search(
        r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(|new Function", script
    )
    assert "renderChain" in script


# -- chain alerts ------------------------------------------------------------------------------


def test_chain_alerts_name_their_root_and_stay_off_the_systemic_loops() -> None:
    runaway = alert("chain_runaway", "chain:session:abc", NOW_MS - 1000)
    repeat = alert("chain_repeat", "chain:r:1:mcp:fs:read:0123456789ab", NOW_MS - 500, tool="mcp:fs:read")
    assert chain_root(runaway) == "session:abc"
    assert chain_root(repeat) == "r:1"
    assert chain_root(alert("chain_repeat", "chain:R:read:0123456789ab", 0, tool=None)) == "R"
    assert chain_root(alert("systemic_loop", "chain:x", 0, tool="t")) is None
    board = AlertBoard()
    for one in (runaway, repeat, alert("chain_runaway", "chain:old", NOW_MS - 7_200_000)):
        assert board.add(one)
    assert board.systemic_loops(NOW_MS) == []
    assert [a.alert_id for a in board.chain_alerts(NOW_MS)] == [repeat.alert_id, runaway.alert_id]
    assert board.chain_alerts(NOW_MS, "r:1") == [repeat]
    summary = board.summary(NOW_MS)
    assert [(a["kind"], a["chain_root"]) for a in summary["chains"]] == [
        ("chain_repeat", "r:1"),
        ("chain_runaway", "session:abc"),
    ]


def test_a_chain_page_lists_its_alerts_even_once_its_runs_are_forgotten() -> None:
    view = FleetView("test")
    feed(view, three_levels())
    view.alert(alert("chain_runaway", "chain:root", NOW_MS - 1000))
    view.alert(alert("chain_runaway", "chain:gone", NOW_MS - 1000))
    dashboard = Dashboard(view, clock=lambda: NOW_S)
    status, chain = get(dashboard, "/fleet/chain", root="root")
    assert [a["alert_id"] for a in chain["alerts"]] == ["chain_runaway:chain:root:50"]
    status, chain = get(dashboard, "/fleet/chain", root="gone")
    assert status == 200
    assert (chain["runs"], [r["note"] for r in chain["rows"]]) == (0, [ROOT_NOT_SEEN])
    assert chain["alerts"][0]["runs"] == 50
    status, overview = get(dashboard, "/fleet/overview")
    assert {a["chain_root"] for a in overview["alerts"]["chains"]} == {"root", "gone"}


# -- metrics -----------------------------------------------------------------------------------


def test_chain_metrics_count_runs_by_depth_and_ignored_chain_fields() -> None:
    events = [
        *delegated("root"),
        *delegated("child", parent="root", depth=1),
        *delegated("grandchild", parent="child", root="root", depth=2),
        *delegated("deep", parent="x", depth=12),
        *delegated("deeper", parent="x", depth=1_000_000),
        *delegated("rooted", root="ignored", depth=5),  # no parent: a root, at depth 0
    ]
    later = delegated("child", calls=1, ts=100)[0]
    events.append(msgspec.structs.replace(later, event_id="again", parent_run_id="elsewhere"))
    events.append(msgspec.structs.replace(later, event_id="again-2", depth=0))
    view = FleetView("test")

    async def scenario() -> None:
        async with EmbeddedRuntime(DELEGATION, workers=2, view=view) as runtime:
            for event in events:
                await runtime.process(event)

    asyncio.run(scenario())
    read = samples(Dashboard(view, serve_metrics=True).respond("/metrics", {}).body.decode())
    started = {
        labels[0][1]: value
        for (name, labels), value in read.items()
        if name == "loopwatch_runs_started_total"
    }
    assert started == {"0": 2, "1": 1, "2": 1, "10+": 2}
    assert read[("loopwatch_chain_fields_ignored_total", ())] == 2
    # F6a's criticals are in the verdict counts, by detector
    deep = read[
        (
            "loopwatch_verdicts_total",
            (("action", "block"), ("detector", "delegation_depth"), ("level", "critical")),
        )
    ]
    engine = Engine(DELEGATION)
    expected = [o for e in events for o in engine.process(e) if isinstance(o, Verdict)]
    assert expected
    assert deep == sum(1 for o in expected if o.detector == "delegation_depth")


def test_fleet_alerts_are_counted_by_any_kind_and_chain_alerts_by_kind() -> None:
    board = AlertBoard()
    board.add(alert("chain_runaway", "chain:R", NOW_MS - 1000))
    board.add(alert("chain_runaway", "chain:R", NOW_MS - 900, runs=100))
    board.add(alert("chain_repeat", "chain:R:read:0123456789ab", NOW_MS - 800, tool="read"))
    board.add(alert("chain_runaway", "chain:old", NOW_MS - 7_200_000))
    board.add(alert("brand_new_kind", "x", NOW_MS))
    read = samples(WorkerMetrics().render(0, 0, 0, {}, board, NOW_MS))
    kinds = {
        labels[0][1]: value
        for (name, labels), value in read.items()
        if name == "loopwatch_fleet_alerts_total"
    }
    assert kinds == {
        "tool_outage": 0,
        "tool_recovered": 0,
        "systemic_loop": 0,
        "chain_repeat": 1,
        "chain_runaway": 3,
        "brand_new_kind": 1,
    }
    assert read[("loopwatch_chain_alerts", (("kind", "chain_runaway"),))] == 1  # chain:R, in the hour
    assert read[("loopwatch_chain_alerts", (("kind", "chain_repeat"),))] == 1


def test_later_events_without_chain_fields_are_not_counted() -> None:
    metrics = WorkerMetrics()
    first = delegated("c", parent="p", depth=3)[0]
    assert isinstance(first, ToolCall)
    metrics.chain(first, started=True)
    metrics.chain(
        msgspec.structs.replace(first, event_id="x", parent_run_id=msgspec.UNSET, depth=msgspec.UNSET), False
    )
    assert (dict(metrics.runs_started), metrics.chain_fields_ignored) == ({"3": 1}, 0)
