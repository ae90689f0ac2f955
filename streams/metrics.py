"""Prometheus metrics of a worker, rendered in the text exposition format (no extra dependency).

Counters: events processed by type, invalid events, verdicts by level / detector / action,
redelivered records, records of ended runs, re-seeks and skipped offsets of the input, and
what the model turns behind the calls cost (``usage``): spend and tokens per agent, loop
spend per agent and detector of the run's first verdict.
Histogram: the time to process one event. Gauges (computed at scrape time by the worker):
active runs, ended runs (tombstones), state bytes, consumer lag per partition.
"""

from __future__ import annotations

import bisect
from collections import Counter

from detectors.events import Abort, Output, Usage, Verdict

__all__ = ["WorkerMetrics"]

BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)


def _escape(value: str) -> str:
    """A label value in the text exposition format: backslash, quote and newline escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(**labels: str) -> str:
    inner = ",".join(f'{key}="{_escape(value)}"' for key, value in labels.items())
    return "{" + inner + "}" if inner else ""


class WorkerMetrics:
    """What a worker counts while it runs."""

    def __init__(self) -> None:
        self.events: Counter[str] = Counter()
        self.invalid = 0
        self.redelivered = 0  # records applied before (crash, rebalance): outbox re-published
        self.ended_run_events = 0  # records of runs that had ended (tombstone)
        self.reseeks = 0  # fetches that started past the last applied record: sought back
        self.gaps = 0  # input offsets the broker no longer had (accepted after a re-seek)
        self.verdicts: Counter[tuple[str, str, str]] = Counter()
        self.spend_usd: dict[str, float] = {}  # agent -> USD
        self.tokens: Counter[tuple[str, str]] = Counter()  # (agent, "input" | "output") -> tokens
        self.loop_spend_usd: dict[tuple[str, str], float] = {}  # (agent, first detector) -> USD
        self._buckets = [0] * len(BUCKETS)
        self._count = 0
        self._sum = 0.0

    def event(self, kind: str, seconds: float) -> None:
        self.events[kind] += 1
        self._count += 1
        self._sum += seconds
        index = bisect.bisect_left(BUCKETS, seconds)
        if index < len(BUCKETS):
            self._buckets[index] += 1

    def output(self, output: Output) -> None:
        if isinstance(output, Verdict):
            self.verdicts[(output.level, output.detector, output.action)] += 1
        else:
            assert isinstance(output, Abort)
            self.verdicts[("critical", output.reason, "abort")] += 1

    def spend(self, agent: str, usage: Usage, loop_usd: float, detector: str | None) -> None:
        """One call's usage; ``loop_usd`` of it counted as loop spend (run first flagged by ``detector``)."""
        self.spend_usd[agent] = self.spend_usd.get(agent, 0.0) + usage.cost_usd
        self.tokens[(agent, "input")] += usage.input_tokens
        self.tokens[(agent, "output")] += usage.output_tokens
        if loop_usd and detector is not None:
            key = (agent, detector)
            self.loop_spend_usd[key] = self.loop_spend_usd.get(key, 0.0) + loop_usd

    def render(self, active_runs: int, ended_runs: int, state_bytes: int, lag: dict[int, int]) -> str:
        lines = [
            "# HELP loopwatch_events_total Events processed, by type.",
            "# TYPE loopwatch_events_total counter",
        ]
        lines += [f"loopwatch_events_total{_labels(type=k)} {v}" for k, v in sorted(self.events.items())]
        lines += [
            "# HELP loopwatch_invalid_events_total Records sent to the dead-letter topic.",
            "# TYPE loopwatch_invalid_events_total counter",
            f"loopwatch_invalid_events_total {self.invalid}",
            "# HELP loopwatch_redelivered_events_total Records applied before and seen again.",
            "# TYPE loopwatch_redelivered_events_total counter",
            f"loopwatch_redelivered_events_total {self.redelivered}",
            "# HELP loopwatch_ended_run_events_total Records of runs that had ended (ignored).",
            "# TYPE loopwatch_ended_run_events_total counter",
            f"loopwatch_ended_run_events_total {self.ended_run_events}",
            "# HELP loopwatch_input_reseeks_total Fetches past the last applied record, sought back.",
            "# TYPE loopwatch_input_reseeks_total counter",
            f"loopwatch_input_reseeks_total {self.reseeks}",
            "# HELP loopwatch_input_gap_records_total Input offsets missing on the broker (skipped).",
            "# TYPE loopwatch_input_gap_records_total counter",
            f"loopwatch_input_gap_records_total {self.gaps}",
            "# HELP loopwatch_verdicts_total Verdicts and aborts published.",
            "# TYPE loopwatch_verdicts_total counter",
        ]
        lines += [
            f"loopwatch_verdicts_total{_labels(level=level, detector=detector, action=action)} {count}"
            for (level, detector, action), count in sorted(self.verdicts.items())
        ]
        lines += [
            "# HELP loopwatch_spend_usd_total What the model turns behind the tool calls cost (usage).",
            "# TYPE loopwatch_spend_usd_total counter",
        ]
        lines += [
            f"loopwatch_spend_usd_total{_labels(agent_id=a)} {v:.6f}"
            for a, v in sorted(self.spend_usd.items())
        ]
        lines += [
            "# HELP loopwatch_tokens_total Tokens of the model turns behind the tool calls (usage).",
            "# TYPE loopwatch_tokens_total counter",
        ]
        lines += [
            f"loopwatch_tokens_total{_labels(agent_id=a, kind=k)} {v}"
            for (a, k), v in sorted(self.tokens.items())
        ]
        lines += [
            "# HELP loopwatch_loop_spend_usd_total Spend of runs from their first verdict on, by detector.",
            "# TYPE loopwatch_loop_spend_usd_total counter",
        ]
        lines += [
            f"loopwatch_loop_spend_usd_total{_labels(agent_id=a, detector=d)} {v:.6f}"
            for (a, d), v in sorted(self.loop_spend_usd.items())
        ]
        lines += [
            "# HELP loopwatch_processing_seconds Time to process one event.",
            "# TYPE loopwatch_processing_seconds histogram",
        ]
        cumulative = 0
        for bound, count in zip(BUCKETS, self._buckets, strict=True):
            cumulative += count
            lines.append(f'loopwatch_processing_seconds_bucket{{le="{bound}"}} {cumulative}')
        lines += [
            f'loopwatch_processing_seconds_bucket{{le="+Inf"}} {self._count}',
            f"loopwatch_processing_seconds_sum {self._sum:.6f}",
            f"loopwatch_processing_seconds_count {self._count}",
            "# HELP loopwatch_active_runs Runs with state on this worker.",
            "# TYPE loopwatch_active_runs gauge",
            f"loopwatch_active_runs {active_runs}",
            "# HELP loopwatch_ended_runs Ended runs whose tombstone still turns away their late events.",
            "# TYPE loopwatch_ended_runs gauge",
            f"loopwatch_ended_runs {ended_runs}",
            "# HELP loopwatch_state_bytes Serialised state of those runs.",
            "# TYPE loopwatch_state_bytes gauge",
            f"loopwatch_state_bytes {state_bytes}",
            "# HELP loopwatch_consumer_lag Records of the input topic not yet processed, by partition.",
            "# TYPE loopwatch_consumer_lag gauge",
        ]
        lines += [f"loopwatch_consumer_lag{_labels(partition=str(p))} {n}" for p, n in sorted(lag.items())]
        return "\n".join(lines) + "\n"
