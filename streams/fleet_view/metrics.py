"""Prometheus metrics of a worker (and of the embedded runtime), exposed with prometheus-client.

Counters: events processed by type, invalid events, verdicts by level / detector / action
(F6a's ``delegation_depth`` included), redelivered records, records of ended runs, re-seeks
and skipped offsets of the input, what the model turns behind the calls cost (``usage``):
spend and tokens per agent, loop spend per agent and detector of the run's first verdict;
delegation chains (F6): runs started by the depth their first event gave them (``10+`` for
10 and deeper, so the labels stay few), and later events whose chain fields were ignored (a
run's chain is fixed by its first event; an adapter that repeats the chain on every event
makes every later event of a subagent count).
Histogram: the time to process one event. Gauges (computed at scrape time by the worker):
active runs, ended runs (tombstones), state bytes, consumer lag per partition. Fleet alerts
(from an :class:`~streams.fleet_view.alert_board.AlertBoard`): alerts by kind (every kind
known to loopwatch always, any other kind as it comes), open tool outages by tool, systemic
loops of the last hour by agent, chain alerts of the last hour by kind.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Iterator

from msgspec import UNSET
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from loopwatch.detectors.events import Event, Output, Usage, chain_of, shape_of
from loopwatch.streams.fleet_view.alert_board import CHAIN_KINDS, AlertBoard

__all__ = ["ALERT_KINDS", "DEPTH_LABELS", "WorkerMetrics", "depth_label"]

BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
#: Depths counted one by one; deeper runs share the label ``"{DEPTH_LABELS}+"``.
DEPTH_LABELS = 10
#: The fleet alert kinds always exposed (0 until one comes), so rules over them see a series.
ALERT_KINDS = ("tool_outage", "tool_recovered", "systemic_loop", *sorted(CHAIN_KINDS))


def depth_label(depth: int) -> str:
    return str(depth) if depth < DEPTH_LABELS else f"{DEPTH_LABELS}+"


class WorkerMetrics:
    """What a worker counts while it runs."""

    def __init__(self) -> None:
        self.events: Counter[str] = Counter()
        self.invalid = 0
        self.redelivered = 0  # records applied before (crash, rebalance): outbox re-published
        self.ended_run_events = 0  # records of runs that had ended (tombstone)
        self.reseeks = 0  # fetches that started past the last applied record: sought back
        self.parsed_evictions = 0  # parsed run states forgotten (LOOPWATCH_PARSED_IDLE_S, _RUNS_MAX)
        self.stale_expiries = 0  # expiry run_ends applied after the run went on: ignored
        self.gaps = 0  # input offsets the broker no longer had (accepted after a re-seek)
        self.fleet_fact_records = 0  # records of the fleet facts topic applied
        self.fleet_states_unstorable = 0  # fleet subject states too large to store (started afresh)
        self.verdicts: Counter[tuple[str, str, str]] = Counter()
        self.spend_usd: dict[str, float] = {}  # agent -> USD
        self.tokens: Counter[tuple[str, str]] = Counter()  # (agent, "input" | "output") -> tokens
        self.loop_spend_usd: dict[tuple[str, str], float] = {}  # (agent, first detector) -> USD
        self.runs_started: Counter[str] = Counter()  # depth label -> runs (F6)
        self.chain_fields_ignored = 0  # later events of a run that carried chain fields (F6)
        self._buckets = [0] * len(BUCKETS)
        self._count = 0
        self._sum = 0.0

    def note_fleet(self, applied: int, unstorable: int) -> None:
        """The fleet processor's counts (fact records applied, states too large to store)."""
        self.fleet_fact_records = applied
        self.fleet_states_unstorable = unstorable

    def event(self, kind: str, seconds: float) -> None:
        self.events[kind] += 1
        self._count += 1
        self._sum += seconds
        index = bisect.bisect_left(BUCKETS, seconds)
        if index < len(BUCKETS):
            self._buckets[index] += 1

    def output(self, output: Output) -> None:
        self.verdicts[shape_of(output)] += 1

    def chain(self, event: Event, started: bool) -> None:
        """An event applied to its run; ``started``: the run's first (its chain fields fix the
        run's place in its delegation chain), else any chain field it carries is ignored."""
        if started:
            found = chain_of(event)
            self.runs_started[depth_label(found[2] if found is not None else 0)] += 1
        elif event.parent_run_id is not UNSET or event.root_run_id is not UNSET or event.depth is not UNSET:
            self.chain_fields_ignored += 1

    def spend(self, agent: str, usage: Usage, loop_usd: float, detector: str | None) -> None:
        """One call's usage; ``loop_usd`` of it counted as loop spend (run first flagged by ``detector``)."""
        self.spend_usd[agent] = self.spend_usd.get(agent, 0.0) + usage.cost_usd
        self.tokens[(agent, "input")] += usage.input_tokens
        self.tokens[(agent, "output")] += usage.output_tokens
        if loop_usd and detector is not None:
            key = (agent, detector)
            self.loop_spend_usd[key] = self.loop_spend_usd.get(key, 0.0) + loop_usd

    def render(
        self,
        active_runs: int,
        ended_runs: int,
        state_bytes: int,
        lag: dict[int, int],
        alerts: AlertBoard | None = None,
        now_ms: int = 0,
    ) -> str:
        """The text exposition format, written by prometheus-client from the current values."""
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Snapshot(self, (active_runs, ended_runs, state_bytes), lag))
        if alerts is not None:
            registry.register(_Alerts(alerts, now_ms))
        return generate_latest(registry).decode()


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


class _Snapshot(Collector):
    """The worker's counts as metric families (collected once per scrape)."""

    def __init__(self, metrics: WorkerMetrics, gauges: tuple[int, int, int], lag: dict[int, int]) -> None:
        self.metrics = metrics
        self.gauges = gauges
        self.lag = lag

    def collect(self) -> Iterator[Metric]:
        m = self.metrics
        events = CounterMetricFamily("loopwatch_events", "Events processed, by type.", labels=["type"])
        for kind, count in sorted(m.events.items()):
            events.add_metric([kind], count)
        yield events
        yield _counter("loopwatch_invalid_events", "Records sent to the dead-letter topic.", m.invalid)
        yield _counter(
            "loopwatch_redelivered_events", "Records applied before and seen again.", m.redelivered
        )
        yield _counter(
            "loopwatch_ended_run_events", "Records of runs that had ended (ignored).", m.ended_run_events
        )
        yield _counter(
            "loopwatch_input_reseeks", "Fetches past the last applied record, sought back.", m.reseeks
        )
        yield _counter(
            "loopwatch_parsed_run_evictions",
            "Parsed run states forgotten, idle for LOOPWATCH_PARSED_IDLE_S or past LOOPWATCH_PARSED_RUNS_MAX "
            "(parsed again when the run goes on).",
            m.parsed_evictions,
        )
        yield _counter(
            "loopwatch_stale_expiries",
            "Idle-run expiries that arrived after the run went on (ignored).",
            m.stale_expiries,
        )
        yield _counter(
            "loopwatch_input_gap_records", "Input offsets missing on the broker (skipped).", m.gaps
        )
        yield _counter(
            "loopwatch_fleet_fact_records",
            "Records of the fleet facts topic applied to the fleet rules.",
            m.fleet_fact_records,
        )
        yield _counter(
            "loopwatch_fleet_states_unstorable",
            "Fleet rule states (a tool, agent or chain) that could not be stored: started afresh.",
            m.fleet_states_unstorable,
        )
        verdicts = CounterMetricFamily(
            "loopwatch_verdicts", "Verdicts and aborts published.", labels=["level", "detector", "action"]
        )
        for (level, detector, action), count in sorted(m.verdicts.items()):
            verdicts.add_metric([level, detector, action], count)
        yield verdicts
        spend = CounterMetricFamily(
            "loopwatch_spend_usd",
            "What the model turns behind the tool calls cost (usage).",
            labels=["agent_id"],
        )
        for agent, usd in sorted(m.spend_usd.items()):
            spend.add_metric([agent], usd)
        yield spend
        tokens = CounterMetricFamily(
            "loopwatch_tokens",
            "Tokens of the model turns behind the tool calls (usage).",
            labels=["agent_id", "kind"],
        )
        for (agent, kind), count in sorted(m.tokens.items()):
            tokens.add_metric([agent, kind], count)
        yield tokens
        loop = CounterMetricFamily(
            "loopwatch_loop_spend_usd",
            "Spend of runs from their first verdict on, by detector.",
            labels=["agent_id", "detector"],
        )
        for (agent, detector), usd in sorted(m.loop_spend_usd.items()):
            loop.add_metric([agent, detector], usd)
        yield loop
        started = CounterMetricFamily(
            "loopwatch_runs_started",
            "Runs started, by their depth in a delegation chain (0: a root; from the run's first event).",
            labels=["depth"],
        )
        for label, count in sorted(m.runs_started.items(), key=lambda item: _depth_order(item[0])):
            started.add_metric([label], count)
        yield started
        yield _counter(
            "loopwatch_chain_fields_ignored",
            "Events after a run's first that carried chain fields (ignored: its first event fixed it).",
            m.chain_fields_ignored,
        )
        cumulative, buckets = 0, []
        for bound, count in zip(BUCKETS, m._buckets, strict=True):
            cumulative += count
            buckets.append((str(bound), cumulative))
        buckets.append(("+Inf", m._count))
        yield HistogramMetricFamily(
            "loopwatch_processing_seconds", "Time to process one event.", buckets=buckets, sum_value=m._sum
        )
        active, ended, size = self.gauges
        yield _gauge("loopwatch_active_runs", "Runs with state on this worker.", active)
        yield _gauge(
            "loopwatch_ended_runs", "Ended runs whose tombstone still turns away their late events.", ended
        )
        yield _gauge("loopwatch_state_bytes", "Serialised state of those runs.", size)
        lag = GaugeMetricFamily(
            "loopwatch_consumer_lag",
            "Records of the input topic not yet processed, by partition.",
            labels=["partition"],
        )
        for partition, behind in sorted(self.lag.items()):
            lag.add_metric([str(partition)], behind)
        yield lag


class _Alerts(Collector):
    """The fleet alerts' series (collected once per scrape)."""

    def __init__(self, board: AlertBoard, now_ms: int) -> None:
        self.board = board
        self.now_ms = now_ms

    def collect(self) -> Iterator[Metric]:
        board = self.board
        alerts = CounterMetricFamily("loopwatch_fleet_alerts", "Fleet alerts, by kind.", labels=["kind"])
        for kind in [*ALERT_KINDS, *sorted(set(board.counts) - set(ALERT_KINDS))]:
            alerts.add_metric([kind], board.counts[kind])
        yield alerts
        outages = GaugeMetricFamily(
            "loopwatch_tool_outage_open",
            "Tools failing across the fleet right now (1 while the outage is open), with its failing runs.",
            labels=["tool"],
        )
        runs = GaugeMetricFamily(
            "loopwatch_tool_outage_runs",
            "Failing runs of an open tool outage when it opened.",
            labels=["tool"],
        )
        for tool, alert in sorted(board.open_outages.items()):
            outages.add_metric([tool], 1)
            runs.add_metric([tool], alert.runs)
        yield outages
        yield runs
        loops: Counter[str] = Counter()
        for alert in board.systemic_loops(self.now_ms):
            loops[alert.agent_id or ""] += 1
        systemic = GaugeMetricFamily(
            "loopwatch_systemic_loops",
            "Loops seen in many runs of an agent (tool and detector pairs alerted in the last hour).",
            labels=["agent_id"],
        )
        for agent, count in sorted(loops.items()):
            systemic.add_metric([agent], count)
        yield systemic
        chained: Counter[str] = Counter(str(alert.kind) for alert in board.chain_alerts(self.now_ms))
        chains = GaugeMetricFamily(
            "loopwatch_chain_alerts",
            "Delegation chains alerted in the last hour, by kind (chain_repeat: per tool and arguments).",
            labels=["kind"],
        )
        for kind in sorted(CHAIN_KINDS):
            chains.add_metric([kind], chained[kind])
        yield chains


def _depth_order(label: str) -> int:
    return int(label.rstrip("+"))
