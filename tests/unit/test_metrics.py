"""The worker's Prometheus exposition: label values escaped, spend counted (read back by the
Prometheus text parser)."""

from prometheus_client.parser import text_string_to_metric_families

from detectors.events import Usage
from streams.metrics import WorkerMetrics


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
