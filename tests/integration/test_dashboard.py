"""The dashboard in a real headless Chromium: what the page shows is what the stream holds.

Served by a worker on the real broker, and by the embedded runtime (``loopwatch run --serve``);
``loopwatch demo --serve`` is checked over HTTP. Screenshots are saved in ``test-artifacts/``.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec
import pytest

from loopwatch.detectors.events import Event, ToolCall, Usage, run_scope
from loopwatch.streams.fleet_view.run_activity import RunActivity
from tests.helpers import FIXTURES, ROOT, Trace
from tests.integration.browser import Chromium
from tests.integration.harness import (
    LOOPWATCH,
    Names,
    WorkerProcess,
    consume,
    event_records,
    expected_outputs,
    fixture_events,
    produce,
    run,
)
from tests.integration.test_worker import fleet_events, start_worker

pytestmark = pytest.mark.integration

ARTIFACTS = ROOT / "test-artifacts"

#: Everything the tests read off the page, as numbers and ids (thousands separators removed).
READ_PAGE = """(() => {
  const number = (node) => Number(node.textContent.replace(/,/g, ""));
  const rows = (id) => [...document.querySelectorAll(`#${id} tbody tr`)];
  const actions = (row) => Object.fromEntries(
    [...row.querySelectorAll("[data-action]")].map((cell) => [cell.dataset.action, number(cell)]));
  return {
    status: document.getElementById("status").dataset.state,
    kpis: Object.fromEntries(
      [...document.querySelectorAll("[data-kpi]")].map((n) => [n.dataset.kpi, number(n)])),
    agents: Object.fromEntries(rows("by-agent").map((row) => [row.dataset.name, actions(row)])),
    detectors: Object.fromEntries(rows("by-detector").map((row) => [row.dataset.name, number(row.cells[1])])),
    runs: rows("runs").map((row) => row.dataset.run),
    feed: rows("feed").map((row) => row.dataset.verdictId),
    run: document.getElementById("run-id")?.textContent ?? null,
    verdicts: rows("verdicts").map((row) => [row.dataset.verdictId, row.dataset.action]),
    spend: rows("spend-runs").map((row) => [row.dataset.run, row.cells[3].textContent]),
    fired: rows("run-detectors").reduce((out, row) => {
      out[row.dataset.name] = (out[row.dataset.name] || 0) + number(row.cells[2]);
      return out;
    }, {}),
  };
})()"""


def action_of(output: dict[str, Any]) -> str:
    return str(output["action"]) if output["type"] == "verdict" else "abort"


def detector_of(output: dict[str, Any]) -> str:
    return str(output["detector"] if output["type"] == "verdict" else output["reason"])


def scope_of(output: dict[str, Any]) -> str:
    return str(output["run_id"] or f"session:{output['session_id']}")


def expected_fleet(events: list[Event], outputs: list[dict[str, Any]]) -> dict[str, Any]:
    """The fleet page's numbers, computed from the stream itself."""
    actions = Counter(action_of(o) for o in outputs)
    agents: dict[str, dict[str, int]] = {}
    for output in outputs:
        counts = agents.setdefault(output["agent_id"], {"warn": 0, "block": 0, "abort": 0})
        counts[action_of(output)] += 1
    return {
        "kpis": {
            "events": len(events),
            "active_runs": len({run_scope(e) for e in events}),
            "warn": actions["warn"],
            "block": actions["block"],
            "abort": actions["abort"],
        },
        "agents": agents,
        "detectors": dict(Counter(detector_of(o) for o in outputs)),
    }


def shown_kpis(page: dict[str, Any]) -> dict[str, int]:
    return {key: page["kpis"][key] for key in ("events", "active_runs", "warn", "block", "abort")}


async def wait_for_page(browser: Chromium, done: Any, timeout: float = 60) -> dict[str, Any]:
    """The page read until ``done(page)`` holds; the last reading is returned either way."""
    deadline = time.monotonic() + timeout
    page: dict[str, Any] = await browser.evaluate(READ_PAGE)
    while not done(page) and time.monotonic() < deadline:
        await asyncio.sleep(0.25)
        page = await browser.evaluate(READ_PAGE)
    return page


async def check_fleet_page(
    browser: Chromium, url: str, events: list[Event], outputs: list[dict[str, Any]]
) -> dict[str, Any]:
    """Open the fleet page; its numbers and breakdowns are the stream's."""
    await browser.open(url)
    await browser.wait_for("document.body.dataset.loaded")
    want = expected_fleet(events, outputs)
    page = await wait_for_page(browser, lambda p: shown_kpis(p) == want["kpis"])
    assert shown_kpis(page) == want["kpis"]
    assert page["agents"] == want["agents"]
    assert page["detectors"] == want["detectors"]
    return page


async def check_run_page(
    browser: Chromium, events: list[Event], outputs: list[dict[str, Any]], shot: str
) -> str:
    """Click the first run of the fleet page's run table; its page lists that run's verdicts."""
    scope = await browser.wait_for("document.querySelector('#runs [data-run-link]')?.dataset.runLink")
    await browser.evaluate("document.querySelector('#runs [data-run-link]').click()")
    mine = [o for o in outputs if scope_of(o) == scope]
    kept = RunActivity().verdicts_per_run  # the page lists the latest verdicts, newest first
    wanted = [[o["verdict_id"], action_of(o)] for o in reversed(mine)][:kept]
    page = await wait_for_page(browser, lambda p: p["run"] == scope and p["verdicts"] == wanted)
    assert page["run"] == scope
    assert page["verdicts"] == wanted
    fired = Counter(detector_of(o) for o in mine)
    assert page["fired"] == dict(fired)
    calls = sum(1 for e in events if isinstance(e, ToolCall) and run_scope(e) == scope)
    assert page["kpis"]["calls"] == calls
    assert page["kpis"]["block"] == sum(1 for o in mine if action_of(o) == "block")
    await browser.screenshot(ARTIFACTS / shot)
    return str(scope)


def loop_run(run_id: str, agent: str, calls: int, cost_usd: float = 0.0) -> list[Event]:
    trace = Trace(run_id, agent_id=agent)
    for _ in range(calls):
        trace.both("read", {"path": "/missing"}, error="ENOENT")
        if cost_usd:
            call = trace.events[-2]
            trace.events[-2] = msgspec.structs.replace(call, usage=Usage(cost_usd=cost_usd))
    return trace.events


def test_worker_dashboard_shows_the_stream_and_updates_live(
    kafka_bootstrap: str, names: Names, tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    events = fixture_events() + fleet_events(runs=30, seed=11)
    outputs = expected_outputs(events)
    worker = start_worker(names, kafka_bootstrap, tmp_path, workers, "w1")
    run(produce(kafka_bootstrap, names.events, event_records(events)))
    run(consume(kafka_bootstrap, names.verdicts, until=len(outputs), timeout=120))
    url = f"http://127.0.0.1:{worker.env['LOOPWATCH_WEB_PORT']}/dashboard"
    # 12 identical failing reads, $0.05 a turn: one warning at call 11, so $0.10 spent in the loop
    extra = loop_run("live-loop", "late-agent", 12, cost_usd=0.05)
    extra_outputs = expected_outputs(extra)
    assert [action_of(o) for o in extra_outputs] == ["warn"]

    async def scenario() -> None:
        async with Chromium() as browser:
            page = await check_fleet_page(browser, url, events, outputs)
            assert page["status"] == "live"
            assert page["feed"]
            assert set(page["feed"]) <= {o["verdict_id"] for o in outputs}
            await browser.screenshot(ARTIFACTS / "dashboard-worker-fleet.png")

            # more traffic while the page is open: it updates without a reload
            await asyncio.to_thread(run, produce(kafka_bootstrap, names.events, event_records(extra)))
            want = expected_fleet(events + extra, outputs + extra_outputs)
            page = await wait_for_page(browser, lambda p: shown_kpis(p) == want["kpis"])
            assert shown_kpis(page) == want["kpis"]
            assert page["agents"]["late-agent"] == {"warn": 1, "block": 0, "abort": 0}
            assert page["feed"][0] == extra_outputs[0]["verdict_id"]  # newest first
            page = await wait_for_page(browser, lambda p: p["spend"])
            assert page["spend"] == [["live-loop", "$0.10"]]

            await check_run_page(browser, events, outputs, "dashboard-worker-run.png")

    asyncio.run(scenario())
    with urllib.request.urlopen(url.replace("/dashboard", "/fleet/run?id=live-loop"), timeout=10) as answer:
        detail = json.loads(answer.read())
    assert [v["verdict_id"] for v in detail["verdict_list"]] == [o["verdict_id"] for o in extra_outputs]
    assert detail["calls"] == 12
    assert detail["errors"] == 12
    with urllib.request.urlopen(
        url.replace("/dashboard", "/fleet/chain?root=live-loop"), timeout=10
    ) as answer:
        chain = json.loads(answer.read())  # a run on its own: a chain of one
    assert [(r["run"], r["level"], r["calls"]) for r in chain["rows"]] == [("live-loop", 0, 12)]


def test_a_view_process_shows_the_fleet_of_workers_that_keep_no_view(
    kafka_bootstrap: str, names: Names, tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    """``loopwatch view`` beside two workers run with ``LOOPWATCH_FLEET_VIEW=false`` (each reads
    its own partitions only): its fleet page shows the stream's numbers, as a worker's own
    view does in the test above, and the workers' views stay empty."""
    events = fixture_events() + fleet_events(runs=30, seed=12)
    outputs = expected_outputs(events)
    pair = [
        start_worker(names, kafka_bootstrap, tmp_path, workers, f"w{n}", LOOPWATCH_FLEET_VIEW="false")
        for n in (1, 2)
    ]
    log = tmp_path / "view.log"
    with log.open("wb") as err:
        view = subprocess.Popen(
            [LOOPWATCH, "view", "--listen", "127.0.0.1:0"],
            env=names.env(kafka_bootstrap),
            stdout=subprocess.DEVNULL,
            stderr=err,
            cwd=ROOT,
        )
    try:
        deadline = time.monotonic() + 60
        found = None
        while found is None and time.monotonic() < deadline and view.poll() is None:
            found = re.search(r"dashboard at (http://\S+)", log.read_text(errors="replace"))
            time.sleep(0.1)
        assert found, log.read_text(errors="replace")
        url = found.group(1)
        run(produce(kafka_bootstrap, names.events, event_records(events)))
        run(consume(kafka_bootstrap, names.verdicts, until=len(outputs), timeout=120))

        async def scenario() -> None:
            async with Chromium() as browser:
                page = await check_fleet_page(browser, url, events, outputs)
                assert set(page["feed"]) <= {o["verdict_id"] for o in outputs}
                await browser.screenshot(ARTIFACTS / "dashboard-view-process.png")

        asyncio.run(scenario())
        with urllib.request.urlopen(url.replace("/dashboard", "/fleet/overview"), timeout=10) as answer:
            overview = json.loads(answer.read())
        assert overview["totals"]["events"] == len(events)
        assert overview["totals"]["verdicts"] == len(outputs)
        for worker in pair:  # (the workers' own views: off)
            port = worker.env["LOOPWATCH_WEB_PORT"]
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/fleet/overview", timeout=10) as answer:
                assert json.loads(answer.read())["totals"]["events"] == 0
    finally:
        view.terminate()
        assert view.wait(20) == 0, log.read_text(errors="replace")


class Served:
    """A ``loopwatch`` command that serves the dashboard, its URL read from its stderr."""

    def __init__(self, args: list[str], tmp_path: Path) -> None:
        self.out = tmp_path / "stdout"
        self.err = tmp_path / "stderr"
        with self.out.open("wb") as out, self.err.open("wb") as err:
            self.proc = subprocess.Popen([LOOPWATCH, *args], stdout=out, stderr=err, cwd=ROOT)

    def wait_done(self, timeout: float = 120, marker: str = "input done") -> str:
        """Once ``marker`` is printed (the input is processed): the dashboard's URL."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.err.read_text(errors="replace")
            if marker in text:
                found = re.search(r"dashboard at (http://\S+)", text)
                assert found, text
                return found.group(1)
            if self.proc.poll() is not None:
                raise AssertionError(f"exited with {self.proc.returncode}: {text}")
            time.sleep(0.1)
        raise AssertionError(f"not done after {timeout}s: {self.err.read_text(errors='replace')}")

    def stop(self) -> int:
        self.proc.terminate()
        return self.proc.wait(20)


def test_run_serve_dashboard_matches_the_verdicts_it_wrote(tmp_path: Path) -> None:
    from loopwatch.streams.inputs.event_lines import BadLine, read_events

    events: list[Event] = []
    for path in sorted(FIXTURES.glob("*.events.jsonl")):
        with path.open("rb") as stream:
            events += [e for e in read_events(stream, str(path)) if not isinstance(e, BadLine)]
    served = Served(["run", "--serve", "127.0.0.1:0", str(FIXTURES)], tmp_path)
    try:
        url = served.wait_done()
        outputs = [json.loads(line) for line in served.out.read_bytes().splitlines()]
        assert outputs == expected_outputs(events)  # the folder is read in name order
        with urllib.request.urlopen(url.replace("/dashboard", "/metrics"), timeout=10) as answer:
            assert answer.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            series = dict(
                line.rsplit(" ", 1)
                for line in answer.read().decode().splitlines()
                if not line.startswith("#")
            )
        verdicts = sum(float(v) for k, v in series.items() if k.startswith("loopwatch_verdicts_total"))
        assert verdicts == len(outputs)
        assert sum(float(v) for k, v in series.items() if k.startswith("loopwatch_events_total")) == len(
            events
        )
        with urllib.request.urlopen(url.replace("/dashboard", "/health"), timeout=10) as answer:
            assert json.loads(answer.read())["status"] == "ok"

        async def scenario() -> None:
            async with Chromium() as browser:
                await check_fleet_page(browser, url, events, outputs)
                await browser.screenshot(ARTIFACTS / "dashboard-embedded-fleet.png")
                await check_run_page(browser, events, outputs, "dashboard-embedded-run.png")
                await browser.evaluate(  # the header's run box
                    "document.getElementById('run-query').value = 'no-such-run';"
                    "document.getElementById('find-run').requestSubmit()"
                )
                missing = await browser.wait_for("document.getElementById('run-missing')?.textContent")
                assert "no-such-run" in missing

        asyncio.run(scenario())
    finally:
        assert served.stop() == 0  # SIGTERM ends the serving cleanly


def test_demo_serve_reports_what_the_demo_saw(tmp_path: Path) -> None:
    served = Served(
        ["demo", "--serve", "127.0.0.1:0", "--rate", "0", "--json", "--runs", "6", "--rounds", "1"], tmp_path
    )
    try:
        url = served.wait_done()
        reports = json.loads(served.out.read_text())
        with urllib.request.urlopen(url.replace("/dashboard", "/fleet/overview"), timeout=10) as answer:
            overview = json.loads(answer.read())
        with urllib.request.urlopen(url, timeout=10) as answer:
            assert b'<script src="/dashboard/app.js">' in answer.read()
    finally:
        served.stop()
    detectors: Counter[str] = Counter()
    for report in reports:
        detectors.update(report["detectors"])
    assert overview["per_detector"] == dict(detectors)
    assert overview["source"] == "loopwatch demo (embedded)"
    assert overview["totals"]["verdicts"] == sum(detectors.values()) > 0
    # one clock: the demo's events are months old, its alerts were seen just now, on the clock
    # the view stamps its events with, so "systemic loops (last hour)" lists every loop counted
    alerts = overview["alerts"]
    loops = alerts["systemic_loops"]
    assert alerts["counts"]["systemic_loop"] >= len(loops) > 0
    assert {a["subject"] for a in loops} == {
        a["subject"] for a in alerts["recent"] if a["kind"] == "systemic_loop"
    }
    assert all(overview["as_of_ms"] - 600_000 < a["seen_ms"] <= overview["as_of_ms"] for a in loops)
    assert all(a["ts"] < overview["as_of_ms"] - 86_400_000 for a in loops)  # (event time: the demo's)


def test_demo_serve_keeps_the_fleet_running_until_stopped(tmp_path: Path) -> None:
    served = Served(["demo", "--serve", "127.0.0.1:0", "--rate", "0", "--runs", "2", "--json"], tmp_path)
    try:
        url = served.wait_done(marker="the fleet keeps running")
        deadline = time.monotonic() + 60
        while "demo round 3" not in served.err.read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "demo round 3" in served.err.read_text()
        with urllib.request.urlopen(
            url.replace("/dashboard", "/fleet/run?id=demo-r2-0-000"), timeout=10
        ) as answer:
            second_round_run = json.loads(answer.read())
        assert second_round_run["calls"] > 0
    finally:
        assert served.stop() == 0


def test_fleet_page_shows_open_outages_and_systemic_loops_with_their_runs(tmp_path: Path) -> None:
    from tests.integration.test_fleet_alerts import SMALL_LOOPS, looping, outage

    t0 = int(time.time() * 1000) - 120_000
    events = sorted(outage("down-", range(6), t0) + looping(t0), key=lambda e: e.ts or 0)
    source = tmp_path / "events.jsonl"
    source.write_bytes(b"".join(msgspec.json.encode(e) + b"\n" for e in events))
    config = tmp_path / "config.json5"
    config.write_text(SMALL_LOOPS)
    served = Served(["run", "--serve", "127.0.0.1:0", "--config", str(config), str(source)], tmp_path)
    try:
        url = served.wait_done()
        lines = [json.loads(line) for line in served.out.read_bytes().splitlines()]
        alerts = {a["kind"]: a for a in lines if a["type"] == "fleet_alert"}
        assert set(alerts) == {"tool_outage", "systemic_loop"}

        async def scenario() -> None:
            async with Chromium() as browser:
                await browser.open(url)
                await browser.wait_for("document.body.dataset.loaded")
                shown = await browser.wait_for(
                    "document.querySelector('#outages tr.alert-row')?.dataset.alertId"
                )
                assert shown == alerts["tool_outage"]["alert_id"]
                loop = await browser.wait_for(
                    "document.querySelector('#systemic tr.alert-row')?.dataset.alertId"
                )
                assert loop == alerts["systemic_loop"]["alert_id"]
                links = await browser.evaluate(
                    "[...document.querySelectorAll('#outages [data-run-link]')].map(a => a.dataset.runLink)"
                )
                assert links == alerts["tool_outage"]["sample_run_ids"]
                await browser.screenshot(ARTIFACTS / "dashboard-fleet-alerts.png")
                await browser.evaluate("document.querySelector('#systemic [data-run-link]').click()")
                opened = await browser.wait_for("location.hash")
                assert opened == "#/run/" + alerts["systemic_loop"]["sample_run_ids"][0]

        asyncio.run(scenario())
    finally:
        assert served.stop() == 0


def test_gateway_dashboard_with_a_token_asks_for_it_and_sends_it() -> None:
    from tests.gateway_process import gateway_process
    from tests.helpers import post_json

    with gateway_process(env={"LOOPWATCH_GATEWAY_TOKENS": "t0ken"}) as gateway:
        url = gateway.url
        call = {"run_id": "token-run", "tool": "read", "params": {"path": "a"}}
        assert post_json(url + "/v1/decide", call, {"Authorization": "Bearer t0ken"})[0] == 200

        async def scenario() -> None:
            async with Chromium() as browser:
                await browser.open(url + "/dashboard")
                asked = await browser.wait_for("document.getElementById('login')?.textContent")
                assert "needs a bearer token" in asked
                await browser.evaluate(
                    "document.getElementById('token').value = 'wrong';"
                    "document.getElementById('login').requestSubmit()"
                )
                again = await browser.wait_for(
                    "document.getElementById('login')?.textContent.includes('refused') && 'refused'"
                )
                assert again == "refused"
                await browser.evaluate(
                    "document.getElementById('token').value = 't0ken';"
                    "document.getElementById('login').requestSubmit()"
                )
                loaded = await browser.wait_for("document.body.dataset.loaded")
                assert loaded.startswith("/fleet/overview")
                await browser.screenshot(ARTIFACTS / "dashboard-gateway-token.png")

        asyncio.run(scenario())


#: The chain page as data: its rows (run, tree level, declared depth, aborted, what fired).
READ_CHAIN = """(() => ({
  root: document.getElementById("chain-root")?.textContent ?? null,
  rows: [...document.querySelectorAll("#chain-tree tbody tr")].map((row) => ({
    run: row.dataset.run,
    text: row.cells[0].querySelector("[data-run-link], .run-id")?.textContent ?? null,
    level: Number(row.dataset.level),
    depth: row.dataset.depth,
    aborted: row.dataset.aborted === "true",
    note: row.dataset.note,
    fired: [...row.querySelectorAll(".fired")].map((f) =>
      [f.dataset.detector, f.dataset.action, f.dataset.level, Number(f.dataset.verdicts)]).sort(),
  })),
  hidden: document.getElementById("chain-hidden")?.textContent ?? null,
  injected: document.querySelectorAll("#main img, #main script, #main b, #main i, #main u").length,
  pwned: window.__pwned ?? null,
}))()"""

CHAIN_CONFIG = (
    "{tools: {loopDetection: {enabled: true}}, "
    "loopwatch: {detectors: {delegation: {enabled: true, maxDepth: 1}}}}"
)


def chain_run(run_id: str, agent: str, chain: dict[str, Any], calls: int = 3) -> list[Event]:
    """A run of distinct, healthy reads whose first event names its place in a chain."""
    trace = Trace(run_id, agent_id=agent)
    for n in range(calls):
        trace.both("read", {"path": f"/{n}"}, {"content": [{"type": "text", "text": str(n)}]})
    trace.events[0] = msgspec.structs.replace(trace.events[0], **chain)
    return trace.events


def fired_by_run(outputs: list[dict[str, Any]]) -> dict[str, list[list[Any]]]:
    """What fired per run, as the chain page lists it: (detector, action, level, verdicts)."""
    counts: Counter[tuple[str, str, str, str]] = Counter(
        (scope_of(o), detector_of(o), action_of(o), o.get("level", "critical")) for o in outputs
    )
    out: dict[str, list[list[Any]]] = {}
    for (scope, detector, action, level), n in counts.items():
        out.setdefault(scope, []).append([detector, action, level, n])
    return {scope: sorted(rows) for scope, rows in out.items()}


def test_chain_page_shows_a_three_level_chain_from_a_run_page(tmp_path: Path) -> None:
    """``run --serve``: from the grandchild's run page to its chain, root -> child -> grandchild,
    with each run's verdicts as the stream has them (the grandchild, too deep, aborted)."""
    events = [
        *chain_run("chain-root", "planner", {}),
        *chain_run("chain-child", "coder", {"parent_run_id": "chain-root", "depth": 1}),
        *chain_run(
            "chain-grandchild",
            "tester",
            {"parent_run_id": "chain-child", "root_run_id": "chain-root", "depth": 2},
        ),
        *chain_run("solo", "ops", {}),
    ]
    source = tmp_path / "events.jsonl"
    source.write_bytes(b"".join(msgspec.json.encode(e) + b"\n" for e in events))
    config = tmp_path / "config.json5"
    config.write_text(CHAIN_CONFIG)
    served = Served(["run", "--serve", "127.0.0.1:0", "--config", str(config), str(source)], tmp_path)
    try:
        url = served.wait_done()
        outputs = [json.loads(line) for line in served.out.read_bytes().splitlines()]
        outputs = [o for o in outputs if o["type"] in ("verdict", "abort")]
        from loopwatch.config import parse_config_text

        assert outputs == expected_outputs(events, parse_config_text(CHAIN_CONFIG))
        fired = fired_by_run(outputs)
        assert set(fired) == {"chain-grandchild"}  # only the run deeper than maxDepth 1
        assert any(o["type"] == "abort" for o in outputs)
        with urllib.request.urlopen(url.replace("/dashboard", "/metrics"), timeout=10) as answer:
            metrics = answer.read().decode()
        started = dict(re.findall(r'^loopwatch_runs_started_total\{depth="(\d+)"\} (\S+)$', metrics, re.M))
        assert started == {"0": "2.0", "1": "1.0", "2": "1.0"}  # chain-root and solo are roots

        async def scenario() -> None:
            async with Chromium() as browser:
                await browser.open(url + "#/run/solo")
                await browser.wait_for("document.getElementById('run-id')?.textContent === 'solo'")
                assert await browser.evaluate("document.getElementById('run-chain-link')") is None

                await browser.open(url + "#/run/chain-grandchild")
                link = await browser.wait_for("document.getElementById('run-chain-link')?.dataset.chainLink")
                assert link == "chain-root"
                await browser.evaluate("document.getElementById('run-chain-link').click()")
                await browser.wait_for("document.querySelectorAll('#chain-tree tbody tr').length === 3")
                page = await browser.evaluate(READ_CHAIN)
                assert page["root"] == "chain-root"
                assert [(r["run"], r["text"], r["level"], r["depth"]) for r in page["rows"]] == [
                    ("chain-root", "chain-root", 0, "0"),
                    ("chain-child", "chain-child", 1, "1"),
                    ("chain-grandchild", "chain-grandchild", 2, "2"),
                ]
                assert {r["run"]: r["fired"] for r in page["rows"] if r["fired"]} == fired
                assert [r["run"] for r in page["rows"] if r["aborted"]] == ["chain-grandchild"]
                assert page["hidden"] is None
                await browser.screenshot(ARTIFACTS / "dashboard-chain.png")
                # a run of the tree opens its run page
                await browser.evaluate(
                    "document.querySelector('#chain-tree [data-run-link=\"chain-child\"]').click()"
                )
                await browser.wait_for("document.getElementById('run-id')?.textContent === 'chain-child'")

        asyncio.run(scenario())
    finally:
        assert served.stop() == 0


def test_chain_alert_links_to_its_chain_and_hostile_ids_stay_text(tmp_path: Path) -> None:
    """A chain alert on the fleet page opens its chain; run and agent ids made of markup are
    shown as text (nothing injected, nothing run); a chain of 300 runs shows its first rows
    and says how many are hidden."""
    from loopwatch.config import parse_config_text
    from loopwatch.detectors.engine import Engine
    from loopwatch.detectors.fleet.alerts import FleetAlert
    from loopwatch.streams.fleet_view.dashboard import Dashboard, start_server
    from loopwatch.streams.fleet_view.run_activity import CHAIN_ROWS
    from loopwatch.streams.fleet_view.view import FleetView

    root = '<img src=x onerror="window.__pwned=1">'
    hostile = ["</td><script>window.__pwned=2</script>", "a&b=c#d?e'f\"g", "session:<b>x</b>"]
    events = chain_run(root, "<i>planner</i>", {})
    for n, run_id in enumerate(hostile):
        events += chain_run(run_id, f"<u>{n}</u>", {"parent_run_id": root, "depth": 1})
    for n in range(300):
        events += chain_run(f"fan-{n:03d}", "coder", {"parent_run_id": hostile[1], "root_run_id": root}, 1)
    view = FleetView("test")
    engine = Engine(parse_config_text(CHAIN_CONFIG))
    now = int(time.time() * 1000)
    for event in events:
        view.event(event, now)
        for output in engine.process(event):
            view.output(output, now)
    alert = FleetAlert(
        alert_id="chain_runaway:test",
        kind="chain_runaway",
        subject=f"chain:{root}",
        runs=304,
        agents=5,
        sample_run_ids=[root, *hostile[:2]],
        since_ts=now,
        ts=now,
        message="Delegation chain started 304 runs",
    )
    view.alert(alert)

    async def scenario() -> None:
        runner = await start_server(Dashboard(view), "127.0.0.1", 0)
        try:
            url = f"http://127.0.0.1:{runner.addresses[0][1]}/dashboard"
            async with Chromium() as browser:
                await browser.open(url)
                shown = await browser.wait_for(
                    "document.querySelector('#chain-alerts tr.alert-row')?.dataset.alertId"
                )
                assert shown == alert.alert_id
                link = await browser.evaluate(
                    "document.querySelector('#chain-alerts [data-chain-link]').dataset.chainLink"
                )
                assert link == root
                await browser.evaluate("document.querySelector('#chain-alerts [data-chain-link]').click()")
                await browser.wait_for("document.querySelectorAll('#chain-tree tbody tr').length > 0")
                page = await browser.evaluate(READ_CHAIN)
                assert page["root"] == root
                assert len(page["rows"]) == CHAIN_ROWS
                assert [(r["run"], r["text"], r["level"]) for r in page["rows"][:4]] == [
                    (root, root, 0),
                    (hostile[0], hostile[0], 1),
                    (hostile[1], hostile[1], 1),
                    ("fan-000", "fan-000", 2),
                ]
                assert page["hidden"] is not None
                assert f"{304 - CHAIN_ROWS} more runs" in page["hidden"]
                assert (page["injected"], page["pwned"]) == (0, None)
                agents = await browser.evaluate(
                    "[...document.querySelectorAll('#chain-tree tbody tr')].slice(0, 2)"
                    ".map((row) => row.cells[0].querySelector('.sub').textContent)"
                )
                assert agents == ["<i>planner</i>", "<u>0</u>"]
                await browser.screenshot(ARTIFACTS / "dashboard-chain-alert.png")
        finally:
            await runner.cleanup()

    asyncio.run(scenario())
