"""The worker's Prometheus exposition: label values escaped, spend counted."""

from detectors.events import Usage
from streams.metrics import WorkerMetrics


def test_label_values_are_escaped_and_spend_is_rendered() -> None:
    metrics = WorkerMetrics()
    agent = 'ops "blue"\\team\nb'
    metrics.spend(agent, Usage(input_tokens=100, output_tokens=7, cost_usd=0.5), 0.0, None)
    metrics.spend(agent, Usage(input_tokens=50, output_tokens=3, cost_usd=0.25), 0.25, "generic_repeat")
    text = metrics.render(0, 0, 0, {})
    label = 'agent_id="ops \\"blue\\"\\\\team\\nb"'
    assert f"loopwatch_spend_usd_total{{{label}}} 0.750000" in text
    assert f'loopwatch_tokens_total{{{label},kind="input"}} 150' in text
    assert f'loopwatch_loop_spend_usd_total{{{label},detector="generic_repeat"}} 0.250000' in text
    assert all(line.count('"') % 2 == 0 for line in text.splitlines() if not line.startswith("#"))
