"""The dashboard's routes and the per-run activity behind them (pure; no server)."""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

import pytest

from loopwatch.config import FleetConfig
from loopwatch.config.errors import LoopwatchError
from loopwatch.detectors.engine import Engine
from loopwatch.detectors.events import Abort, Event, Output, RunEnd, Verdict, encode_output
from loopwatch.streams.fleet_view.dashboard import WEB, Dashboard, parse_address
from loopwatch.streams.fleet_view.run_activity import PREVIEW_CHARS, RunActivity
from loopwatch.streams.fleet_view.view import FleetView
from tests.helpers import Trace

NOW_S = 1_800_000_000.0


def feed(view: FleetView | RunActivity, events: list[Event], start_ms: int) -> list[Output]:
    engine = Engine(FleetConfig.enabled_default())
    outputs: list[Output] = []
    for offset, event in enumerate(events):
        view.event(event, start_ms + offset)
        for output in engine.process(event):
            view.output(output, start_ms + offset)
            outputs.append(output)
    return outputs


def looping(run_id: str, agent: str, calls: int) -> Trace:
    trace = Trace(run_id, agent_id=agent)
    for _ in range(calls):
        trace.both("read", {"path": "/missing"}, error="ENOENT")
    return trace


def get(dashboard: Dashboard, path: str, **query: str) -> tuple[int, Any]:
    answer = dashboard.respond(path, query)
    assert answer.content_type == "application/json"
    return answer.status, json.loads(answer.body)


@pytest.fixture
def fleet() -> tuple[Dashboard, list[Output], list[Event]]:
    view = FleetView("test")
    events = looping("loop-1", "coder", 22).events + looping("warned", "ops", 11).events
    healthy = Trace("ok-1", agent_id="ops")
    for n in range(5):
        healthy.both("read", {"path": f"/f{n}"}, {"content": [{"type": "text", "text": str(n)}]})
    events += healthy.events
    outputs = feed(view, events, int(NOW_S * 1000) - 10_000)
    return Dashboard(view, clock=lambda: NOW_S), outputs, events


def test_overview_numbers_feed_and_runs(fleet: tuple[Dashboard, list[Output], list[Event]]) -> None:
    dashboard, outputs, events = fleet
    status, body = get(dashboard, "/fleet/overview")
    assert status == 200
    assert body["totals"] == {"events": len(events), "verdicts": len(outputs), "runs_tracked": 3}
    assert body["verdicts"] == {"warn": 2, "block": 2, "abort": 1}
    assert body["per_agent"] == {"coder": {"warn": 1, "block": 2, "abort": 1}, "ops": {"warn": 1}}
    assert [v["verdict_id"] for v in body["feed"]] == [o.verdict_id for o in reversed(outputs)]
    assert [r["run"] for r in body["runs"]] == ["loop-1", "warned"]  # worst first; healthy not listed
    assert body["runs"][0]["worst"] == "abort"
    assert body["runs"][0]["verdicts"] == {"warn": 1, "block": 2, "abort": 1}
    assert sum(w["events"] for w in body["timeline"]) == len(events)
    assert len(body["timeline"]) == 30


def test_run_detail_lists_its_verdicts_and_recent_activity(
    fleet: tuple[Dashboard, list[Output], list[Event]],
) -> None:
    dashboard, outputs, _ = fleet
    status, run = get(dashboard, "/fleet/run", id="loop-1")
    assert status == 200
    mine = [json.loads(encode_output(o)) for o in outputs if o.run_id == "loop-1"]
    assert [v["verdict_id"] for v in run["verdict_list"]] == [o["verdict_id"] for o in mine]
    assert [v["message"] for v in run["verdict_list"]] == [o["message"] for o in mine]
    assert (run["calls"], run["results"], run["errors"]) == (22, 22, 22)  # every read failed
    kinds = [entry["kind"] for entry in run["recent"]]
    assert Counter(kinds) == {"call": 22, "result": 22, "verdict": 3, "abort": 1}
    calls = [entry for entry in run["recent"] if entry["kind"] == "call"]
    assert len({entry["args"] for entry in calls}) == 1  # identical arguments: one fingerprint
    assert calls[0]["preview"] == '{"path":"/missing"}'


def test_run_route_errors_say_what_is_wrong(fleet: tuple[Dashboard, list[Output], list[Event]]) -> None:
    dashboard, _, _ = fleet
    assert get(dashboard, "/fleet/run") == (400, {"error": "query parameter id: the run id is required"})
    status, body = get(dashboard, "/fleet/run", id="nope")
    assert status == 404
    assert "'nope'" in body["error"]
    for bad in ("0", "x", "99999", "9" * 5000, "٣"):  # (int() refuses over 4,300 digits)
        for path in ("/fleet", "/fleet/overview"):
            status, body = get(dashboard, path, minutes=bad)
            assert status == 400
            assert "minutes" in body["error"]
        status, body = get(dashboard, "/fleet/chain", root="loop-1", limit=bad)
        assert status == 400
        assert "limit" in body["error"]
    assert get(dashboard, "/nowhere")[0] == 404


def test_a_run_whose_values_hold_lone_surrogates_is_shown() -> None:
    """Params, results and errors may hold lone UTF-16 surrogates (valid on the wire): their
    previews show U+FFFD, as JavaScript does, and the run's page answers."""
    view = FleetView("test")
    trace = Trace("odd", agent_id="ops")
    for _ in range(3):
        trace.both("read", "\ud800 path", error="bad \udc00")
        trace.both("read", {"p": "\ud83d"}, {"content": [{"type": "text", "text": "x\ud83d\ude00"}]})
    feed(view, trace.events, int(NOW_S * 1000) - 1000)
    status, body = get(Dashboard(view, clock=lambda: NOW_S), "/fleet/run", id="odd")
    assert status == 200
    text = json.dumps(body, ensure_ascii=False)
    assert "\ufffd path" in text
    assert "bad \ufffd" in text


def test_page_and_assets_are_served_and_load_nothing_from_outside() -> None:
    dashboard = Dashboard(FleetView("test"))
    page = dashboard.respond("/dashboard/", {})
    assert page.status == 200
    assert page.content_type.startswith("text/html")
    assert dashboard.respond("/dashboard/app.js", {}).content_type.startswith("text/javascript")
    assert dashboard.respond("/dashboard/app.css", {}).content_type.startswith("text/css")
    for asset in WEB.iterdir():
        text = asset.read_text()
        # only the SVG namespace is a URL; nothing is fetched from another host
        assert set(re.findall(r"https?://[^\s\"'`)]+", text)) <= {"http://www.w3.org/2000/svg"}, asset


def test_previews_are_cut_and_can_be_switched_off() -> None:
    trace = Trace("r")
    trace.both("write", {"text": "x" * 1000}, {"ok": True})
    shown = RunActivity()
    feed(shown, trace.events, 0)
    call = shown.run("r")["recent"][0]  # type: ignore[index]
    assert len(call["preview"]) == PREVIEW_CHARS
    assert call["preview"].endswith("...")
    hidden = RunActivity(previews=False)
    feed(hidden, trace.events, 0)
    assert all(entry.get("preview") is None for entry in hidden.run("r")["recent"])  # type: ignore[index]


def test_runs_and_entries_are_bounded() -> None:
    activity = RunActivity(max_runs=3, recent_per_run=5, feed_size=4)
    for n in range(5):
        feed(activity, looping(f"r{n}", "a", 12).events, n * 1000)
    assert list(activity.runs) == ["r2", "r3", "r4"]  # the least recently active are dropped
    assert len(activity.run("r4")["recent"]) == 5  # type: ignore[index]
    assert len(activity.feed) == 4
    assert activity.run("r0") is None


def test_run_end_and_a_returning_run() -> None:
    activity = RunActivity()
    trace = looping("r", "a", 2)
    feed(activity, [*trace.events, RunEnd(event_id="end", run_id="r")], 0)
    assert activity.run("r")["status"] == "ended"  # type: ignore[index]
    feed(activity, looping("r", "a", 1).events, 10)
    assert activity.run("r")["status"] == "active"  # type: ignore[index]


def test_session_scoped_outputs_land_on_their_session() -> None:
    activity = RunActivity()
    abort = Abort(
        verdict_id="v",
        run_id=None,
        agent_id="a",
        session_id="s1",
        trigger_event_id="e",
        reason="tool_loop_recovery_exhausted",
        tool="read",
        count=None,
        message="stopped",
        ts=None,
    )
    activity.output(abort, 5)
    assert activity.run("session:s1")["worst"] == "abort"  # type: ignore[index]


@pytest.mark.parametrize(
    ("text", "expected"),
    [("6066", ("127.0.0.1", 6066)), ("0.0.0.0:80", ("0.0.0.0", 80)), ("[::1]:0", ("::1", 0))],
)
def test_serve_address(text: str, expected: tuple[str, int]) -> None:
    assert parse_address(text) == expected


@pytest.mark.parametrize("text", ["", "host:", "host:port", "1:70000"])
def test_bad_serve_address_says_what_is_expected(text: str) -> None:
    with pytest.raises(LoopwatchError, match="expected PORT or HOST:PORT"):
        parse_address(text)
    with pytest.raises(LoopwatchError, match=f"^--listen '{text}': expected"):
        parse_address(text, "--listen")  # (the gateway's flag)


def test_what_fired_counts_every_verdict_while_the_list_keeps_the_latest() -> None:
    activity = RunActivity(verdicts_per_run=3)
    outputs = feed(activity, looping("r", "a", 30).events, 1000)
    run = activity.run("r")
    assert run is not None
    assert [v["verdict_id"] for v in run["verdict_list"]] == [o.verdict_id for o in outputs[-3:]]
    assert sum(row["verdicts"] for row in run["fired"]) == len(outputs)
    assert run["fired"][0]["action"] == "abort"  # the most serious first
    for row in run["fired"]:
        if row["action"] == "block":
            assert row["count"] == max(
                o.count
                for o in outputs
                if isinstance(o, Verdict) and o.action == "block" and o.detector == row["detector"]
            )
    # blocked retries keep counting (2026-08): the global breaker takes over from generic_repeat
    assert {row["detector"] for row in run["fired"] if row["action"] == "block"} == {
        "generic_repeat",
        "global_circuit_breaker",
    }


def test_an_event_kept_as_its_text_shows_as_its_value() -> None:
    """``run`` and the worker keep params and results as their JSON text: the run's page shows
    them (and fingerprints them) as it shows the decoded values, not the text as it came."""
    from loopwatch.detectors.decoding import decode_event
    from loopwatch.detectors.events import encode_event

    trace = Trace("r")
    trace.both("read", {"path": "/a", "n": [1, 2]}, {"content": [{"type": "text", "text": "hi"}]})
    spaced = [json.dumps(json.loads(encode_event(event)), indent=2).encode() for event in trace.events]
    pages = []
    for texts in (False, True):
        activity = RunActivity()
        feed(activity, [decode_event(line, texts=texts) for line in spaced], 0)
        pages.append(activity.run("r")["recent"])  # type: ignore[index]
    assert pages[0] == pages[1]
    assert pages[1][0]["preview"] == '{"path":"/a","n":[1,2]}'


def test_kept_activity_is_not_tracked_by_the_garbage_collector() -> None:
    """Entries are plain tuples of strings and numbers (and a small value's JSON text, kept
    for its preview): after one young collection the collector no longer walks them."""
    import gc

    from loopwatch.detectors.decoding import decode_event

    activity = RunActivity()
    call = b'{"type":"tool_call","event_id":"c1","run_id":"r","tool":"read","params":{"path":"/a"}}'
    result = call.replace(b"tool_call", b"tool_result").replace(b'"c1"', b'"r1"')[:-1] + b',"error":"x"}'
    activity.event(decode_event(call, texts=True), 1)
    activity.event(decode_event(result, texts=True), 2)
    gc.collect(0)
    recent = activity.runs["r"].recent
    assert len(recent) == 2
    assert not any(gc.is_tracked(entry) for entry in recent)
    assert activity.run("r")["recent"][0]["preview"] == '{"path":"/a"}'  # type: ignore[index]
