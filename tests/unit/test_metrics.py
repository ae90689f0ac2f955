"""The worker's Prometheus exposition: label values escaped, spend counted (read back by the
Prometheus text parser)."""

import re

from prometheus_client.parser import text_string_to_metric_families

from loopwatch.detectors.events import Usage
from loopwatch.detectors.fleet.alerts import FleetAlert
from loopwatch.streams.fleet_view.alert_board import AlertBoard
from loopwatch.streams.fleet_view.metrics import WorkerMetrics
from tests.helpers import ROOT


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_label_values_are_escaped_and_spend_is_rendered() -> None:
    metrics = WorkerMetrics()
    agent = 'ops "blue"\\team\nb'
    metrics.spend(agent, Usage(input_tokens=100, output_tokens=7, cost_usd=0.5), 0.0, None)
    metrics.spend(agent, Usage(input_tokens=50, output_tokens=3, cost_usd=0.25), 0.25, "generic_repeat")
    metrics.event("tool_call", 0.002)
    read = samples(metrics.render(3, 1, 1234, {0: 7}))
    assert read[("loopwatch_spend_usd_total", (("agent_id", agent),))] == 0.75
    assert read[("loopwatch_tokens_total", (("agent_id", agent), ("kind", "input")))] == 150
    assert (
        read[("loopwatch_loop_spend_usd_total", (("agent_id", agent), ("detector", "generic_repeat")))]
        == 0.25
    )
    assert read[("loopwatch_events_total", (("type", "tool_call"),))] == 1
    assert read[("loopwatch_processing_seconds_bucket", (("le", "0.0025"),))] == 1
    assert read[("loopwatch_processing_seconds_bucket", (("le", "0.001"),))] == 0
    assert read[("loopwatch_active_runs", ())] == 3
    assert read[("loopwatch_consumer_lag", (("partition", "0"),))] == 7


def _alert(
    kind: str, subject: str, tool: str, ts: int, agent: str | None = None, runs: int = 5
) -> FleetAlert:
    return FleetAlert(
        alert_id=f"{kind}:{subject}:{ts}",
        kind=kind,  # type: ignore[arg-type]
        subject=subject,
        tool=tool,
        agent_id=agent,
        runs=runs,
        sample_run_ids=[],
        since_ts=ts,
        ts=ts,
        message="",
    )


def test_fleet_alert_series_and_the_alerting_rules_use_the_same_names() -> None:
    board = AlertBoard()
    now = 1_800_000_000_000
    board.add(_alert("tool_outage", "tool:search", "search", now - 60_000))
    board.add(_alert("tool_outage", "tool:fetch", "fetch", now - 120_000))
    board.add(_alert("tool_recovered", "tool:fetch", "fetch", now - 30_000))
    board.add(_alert("tool_recovered", "tool:fetch", "fetch", now - 30_000))  # re-published: same id
    board.add(_alert("systemic_loop", "agent:coder:tool:read:ping_pong", "read", now - 10_000, "coder"))
    board.add(_alert("systemic_loop", "agent:old:tool:read:ping_pong", "read", now - 7_200_000, "old"))
    read = samples(WorkerMetrics().render(0, 0, 0, {}, board, now))
    assert read[("loopwatch_tool_outage_open", (("tool", "search"),))] == 1
    assert ("loopwatch_tool_outage_open", (("tool", "fetch"),)) not in read
    assert read[("loopwatch_tool_outage_runs", (("tool", "search"),))] == 5
    assert read[("loopwatch_systemic_loops", (("agent_id", "coder"),))] == 1
    assert ("loopwatch_systemic_loops", (("agent_id", "old"),)) not in read  # older than the hour
    assert read[("loopwatch_fleet_alerts_total", (("kind", "tool_recovered"),))] == 1
    rules = (ROOT / "docker" / "prometheus" / "alerts.yml").read_text()
    used = set(re.findall(r"\b(loopwatch_[a-z_]+)", rules))
    assert used == {
        "loopwatch_tool_outage_open",
        "loopwatch_systemic_loops",
        "loopwatch_fleet_alerts_total",
        "loopwatch_consumer_lag",
        "loopwatch_chain_alerts",
    }
    exposed = {name for name, _ in read} | {"loopwatch_consumer_lag"}  # lag: a worker's, by partition
    assert used <= exposed
