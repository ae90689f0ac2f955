"""``loopwatch replay``: recorded history through a config, with no side effects.

Reports, per run, the call at which it was first warned, blocked and aborted; per detector
and per agent, how often each fired. ``--compare OTHER`` replays the same history through a
second config and lists the runs whose outcome differs: the call of the first warning, block
or abort, or how often each detector fired (what-if tuning before a rollout, or what moving
to another ``openclawRevision`` would change on recorded history). Where calls carry
``usage``, it reports per agent what the runs spent, how much of it in loops, and what
stopping them at their abort saves, under each config. The fleet-wide rules' alerts (tool
outages and recoveries, systemic loops, delegation chains) are listed with their ids, which
the same history always gives again.
Sources: an events file, an agent history (OpenClaw, Claude Code, Codex, Gemini CLI, OpenHands,
SWE-agent, mini-swe-agent: :mod:`agent_histories`), a folder of them, or a Kafka topic
(``kafka:TOPIC`` with ``--since``/``--until``); without a source, each runtime's default place.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO, TextIO

import msgspec
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from loopwatch.config.fleet import FleetConfig
from loopwatch.config.fleet_rules import fleet_rules
from loopwatch.detectors.engine import Engine
from loopwatch.detectors.events import Abort, Event, ToolCall, chain_of, run_scope
from loopwatch.detectors.fleet.alerts import FleetAlert
from loopwatch.detectors.fleet.chains import chain_key
from loopwatch.detectors.fleet.watch import FleetWatch, WatchHooks
from loopwatch.detectors.hashing import digester_for
from loopwatch.streams.console import report_console
from loopwatch.streams.fleet_view.spend_ledger import SpendLedger
from loopwatch.streams.inputs.config_files import load_config
from loopwatch.streams.inputs.event_lines import BadLine, read_sourced_events, starts_an_event_stream
from loopwatch.streams.inputs.sources import InputError, input_lines

__all__ = [
    "RunSummary",
    "StopComparison",
    "compare_stops",
    "replay",
    "run_replay",
    "stop_change",
    "stop_text",
]


@dataclass
class RunSummary:
    run: str
    agent: str
    calls: int = 0
    first_warning: int | None = None
    first_block: int | None = None
    first_abort: int | None = None
    verdicts: int = 0
    detectors: dict[str, int] = field(default_factory=dict)
    parent_run_id: str | None = None  # the delegation chain, from the run's first event
    root_run_id: str | None = None
    depth: int = 0

    def outcome(self) -> tuple[int | None, int | None, int | None]:
        return self.first_warning, self.first_block, self.first_abort

    def first_stop(self) -> int | None:
        """The call of the first block or abort (the first call the agent did not get to make)."""
        stops = [call for call in (self.first_block, self.first_abort) if call is not None]
        return min(stops) if stops else None


#: how the second config's first stop of a run compares with the first config's
STOP_CHANGES = ("earlier", "later", "same", "only_now", "no_longer")


def stop_change(config_stop: int | None, compare_stop: int | None) -> tuple[str | None, int | None]:
    """``(change, by)``: one of :data:`STOP_CHANGES` (``None``: neither config stops the run)
    and, when both stop it, by how many calls (0 for ``same``)."""
    if config_stop is None:
        return (None, None) if compare_stop is None else ("only_now", None)
    if compare_stop is None:
        return "no_longer", None
    by = compare_stop - config_stop
    return ("earlier" if by < 0 else "later" if by > 0 else "same"), abs(by)


def _calls(count: float) -> str:
    number = f"{count:g}"
    return f"{number} call" if count == 1 else f"{number} calls"


def stop_text(change: str | None, by: int | None) -> str:
    """The change in words: "earlier by 7 calls", "later by 1 call", "only now", "no longer"."""
    if change in ("earlier", "later") and by is not None:
        return f"{change} by {_calls(by)}"
    return {"same": "same call", "only_now": "only now", "no_longer": "no longer"}.get(change or "", "-")


@dataclass(frozen=True)
class StopComparison:
    """The runs each config stops and how the second's first stops compare with the first's.

    ``median_difference``: the median, over the runs both stop, of the second config's first
    stop minus the first's, in calls (negative: the second stops earlier; ``None``: no run
    stopped by both)."""

    stopped_config: int
    stopped_compare: int
    earlier: int
    later: int
    same: int
    only_now: int
    no_longer: int
    both_stopped: int
    median_difference: float | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "stopped": {"config": self.stopped_config, "compare": self.stopped_compare},
            "earlier": self.earlier,
            "later": self.later,
            "same": self.same,
            "only_now": self.only_now,
            "no_longer": self.no_longer,
            "both_stopped": self.both_stopped,
            "median_difference": self.median_difference,
        }

    def line(self) -> str:
        """The summary in one line."""
        if self.median_difference is None:
            median = "no run is stopped by both"
        else:
            value = self.median_difference
            way = "earlier" if value < 0 else "later"
            said = "no difference" if value == 0 else f"{_calls(abs(value))} {way}"
            median = f"median over the {self.both_stopped} runs both stop: {said}"
        return (
            f"stopped: {self.stopped_config} runs by the config, {self.stopped_compare} by --compare; "
            f"--compare stops {self.earlier} earlier, {self.later} later, {self.same} at the same call, "
            f"{self.only_now} only now, {self.no_longer} no longer; {median}"
        )


def compare_stops(runs: dict[str, RunSummary], compared: dict[str, RunSummary]) -> StopComparison:
    """How the first stops of every run under a second config (``compared``) compare with
    those under the first (``runs``)."""
    counts: Counter[str | None] = Counter()
    differences: list[int] = []
    stopped_config = stopped_compare = 0
    for scope, summary in runs.items():
        now, alt = summary.first_stop(), compared[scope].first_stop()
        stopped_config += now is not None
        stopped_compare += alt is not None
        change, _ = stop_change(now, alt)
        counts[change] += 1
        if now is not None and alt is not None:
            differences.append(alt - now)
    return StopComparison(
        stopped_config,
        stopped_compare,
        counts["earlier"],
        counts["later"],
        counts["same"],
        counts["only_now"],
        counts["no_longer"],
        len(differences),
        float(statistics.median(differences)) if differences else None,
    )


def replay(
    events: list[Event],
    config: FleetConfig,
    ledger: SpendLedger | None = None,
    alerts: list[FleetAlert] | None = None,
) -> dict[str, RunSummary]:
    """Every run's summary under ``config`` (pure: fresh in-memory state); spend into ``ledger``,
    the fleet alerts into ``alerts`` (events without ``ts`` are timed when read)."""
    watch = FleetWatch(fleet_rules(config.global_rules), digester_for(config.settings.digest))
    engine = Engine(config, fleet=WatchHooks(watch))
    read_ms = int(time.time() * 1000)
    runs: dict[str, RunSummary] = {}
    for event in events:
        if ledger is not None:
            ledger.event(event)
        scope = run_scope(event)
        summary = runs.get(scope)
        if summary is None:
            summary = runs[scope] = RunSummary(scope, event.agent_id)
            chain = chain_of(event)
            if chain is not None:
                summary.parent_run_id, summary.root_run_id, summary.depth = chain
        if isinstance(event, ToolCall):
            summary.calls += 1
        ts = event.ts if event.ts is not None else read_ms
        stepped = engine.step(event, ts)
        outputs = stepped.outputs
        chained = engine.states.get(scope) if watch.rules.delegation.enabled else None
        root = chain_key(chained) if chained is not None and stepped.kind == "applied" else None
        raised = watch.observe(event, scope, ts, stepped.prepared, outputs, root)
        if alerts is not None:
            alerts += raised
        for output in outputs:
            if ledger is not None:
                ledger.output(output)
            summary.verdicts += 1
            name = output.detector
            summary.detectors[name] = summary.detectors.get(name, 0) + 1
            if isinstance(output, Abort):
                summary.first_abort = summary.first_abort or summary.calls
            elif output.action == "warn":
                summary.first_warning = summary.first_warning or summary.calls
            else:
                summary.first_block = summary.first_block or summary.calls
    return runs


def _millis(text: str | None, default: int) -> int:
    return default if text is None else int(datetime.fromisoformat(text).timestamp() * 1000)


def _check_window(source: str | None, since: str | None, until: str | None) -> None:
    """``--since`` and ``--until``: a Kafka source's, ISO times, in order; else what is wrong."""
    given = [(flag, text) for flag, text in (("--since", since), ("--until", until)) if text is not None]
    if source is None or not source.startswith("kafka:"):
        if given:
            where = source or "the default places of the agent runtimes"
            raise InputError(f"{given[0][0]} applies to a Kafka source (kafka:TOPIC) only, not to {where}")
        return
    if not source.removeprefix("kafka:"):
        raise InputError("kafka: names no topic (kafka:TOPIC, e.g. kafka:loopwatch.tool-events)")
    for flag, text in given:
        try:
            datetime.fromisoformat(text)
        except ValueError:
            raise InputError(f"{flag} {text!r}: not an ISO time (e.g. 2026-12-01T00:00)") from None
    if since is not None and until is not None and _millis(until, 0) < _millis(since, 0):
        raise InputError(f"--until {until} is before --since {since}")


def _kafka_lines(topic: str, since: str | None, until: str | None) -> Iterator[tuple[str, bytes]]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    from loopwatch.config.stream_settings import parse_stream_settings
    from loopwatch.streams.kafka.connect import aiokafka_auth, start_client

    settings = parse_stream_settings(os.environ)

    async def fetch() -> list[tuple[str, bytes]] | None:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=settings.kafka_bootstrap, enable_auto_commit=False, **aiokafka_auth(settings)
        )
        await start_client(
            consumer.start, consumer.stop, settings.kafka_bootstrap, "LOOPWATCH_KAFKA_BOOTSTRAP"
        )
        try:
            if topic not in await consumer.topics():
                return None
            consumer._client.add_topic(topic)  # a consumer without subscription knows no partitions
            await consumer._client.force_metadata_update()
            partitions = [
                TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or [])
            ]
            consumer.assign(partitions)
            start, stop = _millis(since, 0), _millis(until, 2**62)
            starts = await consumer.offsets_for_times(dict.fromkeys(partitions, start))
            ends = await consumer.end_offsets(partitions)
            lines: list[tuple[int, str, bytes]] = []
            for tp in partitions:
                found = starts.get(tp)
                if found is None:
                    continue
                consumer.seek(tp, found.offset)
                while await consumer.position(tp) < ends[tp]:
                    batch = await consumer.getmany(tp, timeout_ms=1000)
                    for message in batch.get(tp, []):
                        if message.timestamp <= stop:
                            lines.append((message.timestamp, f"{topic}[{tp.partition}]", message.value))
            return [(where, value) for _, where, value in sorted(lines, key=lambda item: item[0])]
        finally:
            await consumer.stop()

    fetched = asyncio.run(fetch())
    if fetched is None:
        raise InputError(f"no such topic on {settings.kafka_bootstrap}: {topic}")
    yield from fetched


def _load(source: str | None, args: argparse.Namespace, max_bytes: int, err: TextIO) -> list[Event]:
    events: list[Event] = []
    transcripts: list[Event] = []
    if source is not None and source.startswith("kafka:"):
        lines: Iterator[tuple[str, bytes]] = _kafka_lines(
            source.removeprefix("kafka:"), args.since, args.until
        )
    else:
        lines, transcripts = _event_files_and_transcripts(source, getattr(args, "agent_id", None), err)
        events.extend(transcripts)
    skipped = 0
    on_terminal = Console(file=err).is_terminal
    with Progress(console=Console(file=err), transient=True, disable=not on_terminal) as progress:
        task = progress.add_task("reading history", total=None)
        for item in read_sourced_events(lines, max_bytes, texts=True):
            if isinstance(item, BadLine):
                skipped += 1
                print(f"loopwatch: skipped invalid event at {item}", file=err)
                continue
            events.append(item)
            if len(events) % 5000 == 0:
                progress.advance(task, 5000)
    if skipped:
        total = skipped + len(events) - len(transcripts)
        print(f"loopwatch: {skipped} of {total} lines were not valid events (skipped)", file=err)
    return events


def _event_files_and_transcripts(
    source: str | None, agent_id: str | None, err: TextIO
) -> tuple[Iterator[tuple[str, bytes]], list[Event]]:
    """Lines of the event files of a source, and the events of its agent histories (every
    runtime's default place without a source)."""
    from loopwatch.streams.history.agent_histories import default_files, history_files, read_histories

    files = default_files() if source is None else history_files(source)
    found = read_histories(files, agent_id, err)
    event_files = [] if source is None else found.others
    if source is not None and Path(source).is_dir():  # a folder: its event streams, the rest named once
        event_files = [path for path in found.others if starts_an_event_stream(path)]
        left_out(source, [path for path in found.others if path not in event_files], err)

    def lines() -> Iterator[tuple[str, bytes]]:
        for path in event_files:
            yield from input_lines(str(path))

    return lines(), found.events


def left_out(
    folder: str, paths: list[Path], err: TextIO, what: str = "neither event streams nor agent histories"
) -> None:
    """One line naming the files of a folder that were not read (``what`` they are not)."""
    if not paths:
        return
    names = [str(path.relative_to(folder)) for path in paths[:5]]
    more = f" and {len(paths) - 5} more" if len(paths) > 5 else ""
    print(
        f"loopwatch: left out {len(paths)} file(s) of {folder} that are {what}: "
        f"{', '.join(names)}{more} (name a file alone to read it line by line)",
        file=err,
    )


def _table(
    title: str, rows: Sequence[tuple[str, ...]], headers: tuple[str, ...], text: tuple[str, ...] = ()
) -> Table:
    """A table: the first column and the columns named in ``text`` left-aligned, the rest right."""
    table = Table(title=title)
    for index, header in enumerate(headers):
        left = index == 0 or header in text
        table.add_column(header, justify="left" if left else "right", overflow="fold" if left else "ellipsis")
    for row in rows:
        table.add_row(*row)
    return table


def _fmt(value: int | None) -> str:
    return "-" if value is None else str(value)


def _usd(value: float) -> str:
    return f"${value:,.2f}"


def _print_spend(console: Console, now: dict[str, Any], other: dict[str, Any] | None) -> None:
    """Per agent: spend, loop spend, what stopping saved (and the same under ``--compare``)."""
    if not now["spend_usd"] and not (other and other["spend_usd"]):
        return  # no usage in this history
    headers: tuple[str, ...] = ("agent", "spend", "in loops", "saved by stopping")
    rows: list[tuple[str, ...]]
    if other is None:
        rows = [
            (r["name"], _usd(r["spend_usd"]), _usd(r["loop_spend_usd"]), _usd(r["saved_usd"]))
            for r in now["per_agent"]
        ]
    else:
        headers += ("in loops, --compare", "saved, --compare")
        theirs = {r["name"]: r for r in other["per_agent"]}
        empty = {"loop_spend_usd": 0.0, "saved_usd": 0.0}
        rows = [
            (
                r["name"],
                _usd(r["spend_usd"]),
                _usd(r["loop_spend_usd"]),
                _usd(r["saved_usd"]),
                _usd(theirs.get(r["name"], empty)["loop_spend_usd"]),
                _usd(theirs.get(r["name"], empty)["saved_usd"]),
            )
            for r in now["per_agent"]
        ]
    console.print(_table("what loops cost (usage of the calls)", rows, headers))
    line = (
        f"spent {_usd(now['spend_usd'])}, {_usd(now['loop_spend_usd'])} of it in loops; "
        f"stopping the runs when aborted saves {_usd(now['saved_usd'])}"
    )
    if other is not None:
        gain = other["saved_usd"] - now["saved_usd"]
        sign = "+" if gain >= 0 else "-"
        line += f"; with --compare it saves {_usd(other['saved_usd'])} ({sign}{_usd(abs(gain))})"
    console.print(line, soft_wrap=True)


def _stop_record(now: RunSummary, alt: RunSummary) -> dict[str, Any]:
    """A differing run's first stops under both configs, and how they compare."""
    config_stop, compare_stop = now.first_stop(), alt.first_stop()
    change, by = stop_change(config_stop, compare_stop)
    return {"config": config_stop, "compare": compare_stop, "change": change, "by": by}


def _fired(detectors: dict[str, int]) -> str:
    return "\n".join(f"{name} {count}" for name, count in sorted(detectors.items())) or "-"


def run_replay(args: argparse.Namespace, out: BinaryIO, err: TextIO) -> int:
    config = load_config(args.config)
    other = load_config(args.compare) if args.compare else None
    _check_window(args.source, args.since, args.until)
    events = _load(args.source, args, config.settings.max_event_bytes, err)
    if not events:
        print(
            f"loopwatch: no event to replay in {args.source or 'the default places of the agent runtimes'}. "
            "Event lines are described by `loopwatch run --help`; agent histories (OpenClaw, Claude "
            "Code, Codex, Gemini CLI, OpenHands, SWE-agent) are read as they are.",
            file=err,
        )
        return 1
    spend = SpendLedger(runs_kept=len(events) + 1)
    alerts: list[FleetAlert] = []
    runs = replay(events, config, spend, alerts)
    other_spend = SpendLedger(runs_kept=len(events) + 1)
    compared = replay(events, other, other_spend) if other is not None else None
    changed: list[tuple[RunSummary, RunSummary]] = []
    if compared is not None:
        changed = [
            (s, compared[scope])
            for scope, s in runs.items()
            if s.outcome() != compared[scope].outcome() or s.detectors != compared[scope].detectors
        ]
    differences = [
        {
            "run": now.run,
            "agent": now.agent,
            "config": asdict(now),
            "compare": asdict(alt),
            "stop": _stop_record(now, alt),
        }
        for now, alt in changed
    ]
    stops = compare_stops(runs, compared) if compared is not None else None
    detectors: Counter[str] = Counter()
    other_detectors: Counter[str] = Counter()  # with --compare
    for summary in (compared or {}).values():
        other_detectors.update(summary.detectors)
    agents: dict[str, Counter[str]] = {}
    for summary in runs.values():
        detectors.update(summary.detectors)
        agent = agents.setdefault(summary.agent, Counter())
        agent["runs"] += 1
        agent["warned"] += summary.first_warning is not None
        agent["blocked"] += summary.first_block is not None
        agent["aborted"] += summary.first_abort is not None
    if args.json:
        document: dict[str, Any] = {
            "events": len(events),
            "detectors": dict(detectors),
            "agents": {name: dict(counts) for name, counts in agents.items()},
            "runs": [asdict(s) for s in runs.values()],
        }
        document["spend"] = spend.summary()
        document["alerts"] = [msgspec.to_builtins(alert) for alert in alerts]
        if compared is not None:
            document["differences"] = differences
            document["compare_detectors"] = dict(other_detectors)
            document["compare_spend"] = other_spend.summary()
            document["compare_stops"] = stops.as_dict() if stops is not None else None
        out.write(json.dumps(document, indent=1).encode() + b"\n")
        return 0
    console = report_console()
    console.print(f"{len(events)} events, {len(runs)} runs")
    if compared is None:
        console.print(
            _table("per detector", [(d, str(n)) for d, n in detectors.most_common()], ("detector", "fired"))
        )
    else:
        names = sorted(set(detectors) | set(other_detectors), key=lambda d: (-detectors[d], d))
        console.print(
            _table(
                "per detector",
                [(d, str(detectors[d]), str(other_detectors[d])) for d in names],
                ("detector", "fired", "with --compare"),
            )
        )
    console.print(
        _table(
            "per agent",
            [
                (a, str(c["runs"]), str(c["warned"]), str(c["blocked"]), str(c["aborted"]))
                for a, c in sorted(agents.items())
            ],
            ("agent", "runs", "warned", "blocked", "aborted"),
        )
    )
    _print_spend(console, spend.summary(), other_spend.summary() if compared is not None else None)
    if alerts:
        alert_rows = [(str(a.kind), a.subject, str(a.runs), a.message) for a in alerts]
        console.print(
            _table("fleet alerts", alert_rows, ("kind", "subject", "runs", "message"), text=("message",))
        )
    flagged = [s for s in runs.values() if s.verdicts]
    console.print(
        _table(
            "runs with verdicts (call number of the first)",
            [
                (
                    s.run,
                    s.agent,
                    s.parent_run_id or "",
                    str(s.calls),
                    _fmt(s.first_warning),
                    _fmt(s.first_block),
                    _fmt(s.first_abort),
                )
                for s in flagged
            ],
            ("run", "agent", "started by", "calls", "warning", "block", "abort"),
        )
    )
    if compared is not None:
        rows = [
            (
                now.run,
                now.agent,
                "/".join(map(_fmt, now.outcome())),
                "/".join(map(_fmt, alt.outcome())),
                stop_text(*stop_change(now.first_stop(), alt.first_stop())),
                _fired(now.detectors),
                _fired(alt.detectors),
            )
            for now, alt in changed
        ]
        headers = (
            "run",
            "agent",
            "first w/b/a",
            "--compare",
            "--compare stops it",
            "fired",
            "fired with --compare",
        )
        title = f"what {args.compare} would have done differently"
        text = ("agent", "--compare stops it", "fired", "fired with --compare")
        console.print(_table(title, rows, headers, text=text))
        console.print(f"{len(differences)} of {len(runs)} runs differ")
        if stops is not None:
            console.print(stops.line(), soft_wrap=True)
    return 0
