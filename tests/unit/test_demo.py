import argparse
import asyncio
import io
import json

from loopwatch.config import FleetConfig, parse_config_text
from loopwatch.detectors.fleet.alerts import FleetAlert
from loopwatch.streams.embedded.demo import DEMO_CONFIG, DEMO_EPOCH_MS, replay_traces, run_demo, simulate
from loopwatch.streams.embedded.demo_fleet import OUTAGE_FROM_S, OUTAGE_UNTIL_S

DEMO = parse_config_text(DEMO_CONFIG)


def test_every_stuck_scenario_is_caught_and_no_healthy_run_flagged() -> None:
    reports = asyncio.run(simulate(DEMO, seed=11, runs_per_scenario=8))
    assert len(reports) == 17
    for report in reports:
        assert report.runs == 8
        if report.name == "subagent storm":  # a chain's rule: see the test of the delegation chain
            continue
        if report.healthy:
            assert report.flagged_healthy == 0, report.name
            assert report.warned == report.blocked == report.aborted == 0, report.name
            assert report.loop_usd == report.saved_usd == 0, report.name
        else:
            assert report.stopped == 8, report.name  # every stuck run is blocked or aborted
            assert 0 < report.loop_usd < report.spent_usd, report.name
    by_name = {r.name: r for r in reports}
    assert by_name["stuck poll"].detectors.get("known_poll_no_progress")
    assert by_name["ping-pong"].detectors.get("ping_pong")
    assert by_name["unknown tool"].detectors.get("unknown_tool_repeat")
    assert by_name["loop after compaction"].detectors.get("compaction_loop_persisted") == 8
    assert by_name["argument churn"].detectors.get("argument_churn")
    assert by_name["drifting build failure"].detectors.get("generic_repeat")
    assert by_name["tool rotator"].detectors.get("run_no_progress")
    assert by_name["edit-undo"].detectors.get("edit_undo")
    assert sum(r.saved_usd for r in reports) > 0


def test_openclaws_rules_alone_miss_only_the_loops_of_loopwatchs_own_rules() -> None:
    reports = {
        r.name: r for r in asyncio.run(simulate(FleetConfig.enabled_default(), seed=11, runs_per_scenario=8))
    }
    missed = {name for name, r in reports.items() if not r.healthy and r.stopped < r.runs}
    assert missed == {"tool rotator", "edit-undo", "subagent storm"}
    assert not any(r.flagged_healthy for r in reports.values())
    # the 2026-08 rules: churn warns, then its stale abort stops the run
    assert reports["argument churn"].detectors.get("argument_churn_stale") == 8


def test_the_2026_08_scenarios_are_missed_by_the_2026_05_rules() -> None:
    from tests.helpers import with_revision

    reports = asyncio.run(simulate(with_revision("2026-05"), seed=11, runs_per_scenario=4))
    by_name = {r.name: r for r in reports}
    assert by_name["drifting build failure"].stopped == 0  # warned (identical calls), never blocked
    assert by_name["argument churn"].stopped == 0


def test_demo_fleet_raises_the_outage_its_recovery_and_the_bad_prompt_s_systemic_loop() -> None:
    alerts: list[FleetAlert] = []
    reports = asyncio.run(simulate(DEMO, seed=7, runs_per_scenario=24, alerts=alerts))
    by_subject: dict[str, list[FleetAlert]] = {}
    for alert in alerts:
        by_subject.setdefault(alert.subject, []).append(alert)
    outage = by_subject["tool:web_search"]
    assert [a.kind for a in outage] == ["tool_outage", "tool_recovered"]
    assert outage[0].since_ts >= DEMO_EPOCH_MS + OUTAGE_FROM_S * 1000
    assert outage[1].ts >= DEMO_EPOCH_MS + OUTAGE_UNTIL_S * 1000  # the first success after it
    loops = by_subject["agent:support-v2:tool:read:generic_repeat"]
    assert loops[0].runs == 10
    assert loops[0].active_runs == 48  # the agent's looping and healthy runs
    assert not any(a.agent_id == "analyst" for a in alerts)  # the outage is the tool's, not theirs
    assert all(r.flagged_healthy == 0 for r in reports)
    second: list[FleetAlert] = []
    asyncio.run(simulate(DEMO, seed=7, runs_per_scenario=24, alerts=second))
    assert [a.alert_id for a in second] == [a.alert_id for a in alerts]


def test_demo_fleet_s_subagent_storm_raises_its_chain_alerts_and_blocks_the_repeats() -> None:
    """Each subagent looks healthy alone; the chain (24 runs: maxRuns 12, the spec read 5 and 8
    times) raises chain_repeat at both thresholds and chain_runaway at 12 and 24 runs, and the
    calls after the critical threshold are blocked."""
    alerts: list[FleetAlert] = []
    reports = asyncio.run(simulate(DEMO, seed=7, runs_per_scenario=24, alerts=alerts))
    storm = {r.name: r for r in reports}["subagent storm"]
    chain = [(a.kind, a.runs) for a in alerts if a.kind.startswith("chain_")]
    assert sorted(chain) == [
        ("chain_repeat", 5),
        ("chain_repeat", 8),
        ("chain_runaway", 12),
        ("chain_runaway", 24),
    ]
    assert {a.subject.split(":")[1] for a in alerts if a.kind.startswith("chain_")} == {"demo-16-000"}
    assert storm.blocked == storm.runs - 8  # every read of the spec after the eighth
    assert storm.aborted == 0  # chain blocks do not count toward the run's escalation
    assert set(storm.detectors) <= {"chain_repeat", "chain_runaway"}


def test_demo_is_reproducible() -> None:
    first = asyncio.run(simulate(FleetConfig.enabled_default(), seed=5, runs_per_scenario=4))
    second = asyncio.run(simulate(FleetConfig.enabled_default(), seed=5, runs_per_scenario=4))
    assert first == second


def test_real_traces_give_their_expected_verdict_counts() -> None:
    reports = {r.name: r for r in asyncio.run(replay_traces(FleetConfig.enabled_default()))}
    assert reports["trace: read-error-loop"].blocked == 1
    assert reports["trace: post-compaction-abort"].aborted == 1
    assert reports["trace: process-poll-loop"].warned == 2
    assert all(r.flagged_healthy == 0 for r in reports.values())


def test_demo_json_output() -> None:
    out = io.BytesIO()
    args = argparse.Namespace(seed=7, runs=2, json=True, config=None)
    assert run_demo(args, out, io.StringIO()) == 0
    rows = json.loads(out.getvalue())
    assert {row["name"] for row in rows} >= {"stuck poll", "trace: heartbeat-runs"}


def test_piped_output_keeps_names_whole_and_has_no_colour_codes() -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "loopwatch", "demo", "--runs", "2"],
        capture_output=True,
        env={**__import__("os").environ, "COLUMNS": "80"},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    text = done.stdout.decode()
    rows = [line.strip() for line in text.splitlines()]
    for name in ("healthy: research (web_search outage)", "trace: post-compaction-abort"):  # whole
        assert any(row.startswith(name + " ") and row[len(name) :].split()[0].isdigit() for row in rows), name
    assert "\x1b[" not in text
    assert "stopping the aborted runs saved $" in text


def test_the_summary_fits_80_columns_explains_its_columns_and_ends_with_next_steps() -> None:
    from rich.console import Console

    from loopwatch.streams.embedded.demo import render

    alerts: list[FleetAlert] = []
    reports = asyncio.run(simulate(DEMO, seed=7, runs_per_scenario=4, alerts=alerts))
    reports += asyncio.run(replay_traces(DEMO, None))
    screen = io.StringIO()
    render(reports, Console(file=screen, width=80, no_color=True), 1.0, 4 * len(reports), alerts)
    lines = screen.getvalue().splitlines()
    assert max(len(line) for line in lines) <= 80
    header = " ".join(lines[:6])
    for column in ("scenario", "runs", "warn", "block", "abort", "alarm", "loops", "saved"):
        assert column in header, column
    text = "\n".join(lines)
    assert "false alarm: healthy runs warned, blocked or stopped" in text
    assert "$ saved: spend avoided by stopping runs at their abort" in text
    assert text.rstrip().splitlines()[-4] == "next:"
    assert "loopwatch demo --serve" in text
