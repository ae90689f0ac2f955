"""``loopwatch demo``: a simulated fleet and real recorded traces through the embedded runtime.

The fleet (``streams.embedded.demo_fleet``) runs 24 agents per scenario at once, interleaved at
random (seeded), through :class:`streams.embedded.runtime.EmbeddedRuntime` — the same partitioning
by run scope as the Kafka path. Agents honour verdicts. Then every bundled real OpenClaw
trace is replayed. The summary table says, per scenario, how many runs were warned,
blocked and aborted, after how many calls, and how many healthy runs were flagged.

Every simulated call carries ``usage`` (a model turn of $0.01-0.04): the summary also says
what the loops cost (spend from a run's first verdict on) and what stopping them saved (the
calls the aborted runs' scripts had left). Without ``--config`` the demo switches on
loopwatch's own rules too (:data:`DEMO_CONFIG`), so every scenario has its detector.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time
from collections import Counter
from contextlib import AsyncExitStack, suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, TextIO

from msgspec import UNSET
from rich import box
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from loopwatch.config.fleet import FleetConfig, parse_config_text
from loopwatch.detectors.events import (
    Abort,
    CompactionRetry,
    Event,
    Output,
    RunEnd,
    ToolCall,
    ToolResult,
    Usage,
    Verdict,
    run_scope,
)
from loopwatch.detectors.fleet.alerts import FleetAlert
from loopwatch.streams.console import report_console
from loopwatch.streams.embedded.demo_fleet import (
    OUTAGE_FROM_S,
    OUTAGE_TOOL,
    OUTAGE_UNTIL_S,
    SCENARIOS,
    Scenario,
    Step,
    outage_error,
)
from loopwatch.streams.embedded.runtime import EmbeddedRuntime
from loopwatch.streams.fleet_view.dashboard import serve_until_interrupted, serving
from loopwatch.streams.fleet_view.view import FleetView
from loopwatch.streams.inputs.config_files import load_config
from loopwatch.streams.inputs.event_lines import BadLine, read_events

__all__ = ["Pace", "RunOutcome", "ScenarioReport", "run_demo", "simulate"]

FIXTURES = Path(__file__).parent / "data" / "fixtures"


#: the demo's config when none is given: OpenClaw's defaults plus loopwatch's own rules
#: The simulated fleet's clock starts here (2026-01-05 09:00 UTC, a Monday morning).
DEMO_EPOCH_MS = 1_767_603_600_000

DEMO_CONFIG = (
    "{tools: {loopDetection: {enabled: true}}, loopwatch: {detectors: {"
    "runNoProgress: {enabled: true}, editUndo: {enabled: true}, loopBudget: {usd: 1}, "
    "delegation: {enabled: true, maxRuns: 12, chainWarningThreshold: 5, chainCriticalThreshold: 8, "
    "block: true}}}}"
)


@dataclass
class RunOutcome:
    calls: int = 0
    first_warn: int | None = None
    first_block: int | None = None
    aborted_at: int | None = None
    verdicts: int = 0
    spent_usd: float = 0.0
    loop_usd: float = 0.0
    saved_usd: float = 0.0


@dataclass
class ScenarioReport:
    name: str
    healthy: bool
    runs: int = 0
    warned: int = 0
    blocked: int = 0
    aborted: int = 0
    median_calls_to_warning: float | None = None
    median_calls_to_block: float | None = None
    flagged_healthy: int = 0
    stopped: int = 0  # runs with a block or an abort
    detectors: dict[str, int] = field(default_factory=dict)
    spent_usd: float = 0.0
    loop_usd: float = 0.0  # spend of the runs from their first verdict on
    saved_usd: float = 0.0  # what the aborted runs would still have spent


def _summarise(
    name: str, healthy: bool, outcomes: list[RunOutcome], detectors: Counter[str]
) -> ScenarioReport:
    warns = [o.first_warn for o in outcomes if o.first_warn is not None]
    blocks = [o.first_block for o in outcomes if o.first_block is not None]
    return ScenarioReport(
        name=name,
        healthy=healthy,
        runs=len(outcomes),
        warned=len(warns),
        blocked=len(blocks),
        aborted=sum(1 for o in outcomes if o.aborted_at is not None),
        median_calls_to_warning=statistics.median(warns) if warns else None,
        median_calls_to_block=statistics.median(blocks) if blocks else None,
        flagged_healthy=sum(1 for o in outcomes if o.verdicts) if healthy else 0,
        stopped=sum(1 for o in outcomes if o.first_block is not None or o.aborted_at is not None),
        detectors=dict(detectors),
        spent_usd=round(sum(o.spent_usd for o in outcomes), 4),
        loop_usd=round(sum(o.loop_usd for o in outcomes), 4),
        saved_usd=round(sum(o.saved_usd for o in outcomes), 4),
    )


def _error(step: Step, during_outage: bool, noise: random.Random) -> str | None:
    """The error a step's tool gives: the outage's, if it is the outage tool and down now."""
    return outage_error(noise) if during_outage and step.tool == OUTAGE_TOOL else step.error


def _note(outcome: RunOutcome, outputs: list[Output], detectors: Counter[str]) -> bool:
    """Record outputs of one event; True if the run was aborted."""
    aborted = False
    for output in outputs:
        outcome.verdicts += 1
        if isinstance(output, Verdict):
            detectors[output.detector] += 1
            if output.action == "warn" and outcome.first_warn is None:
                outcome.first_warn = outcome.calls
            if output.action == "block" and outcome.first_block is None:
                outcome.first_block = outcome.calls
        elif isinstance(output, Abort):
            detectors[output.detector] += 1
            outcome.aborted_at = outcome.calls
            aborted = True
    return aborted


class Pace:
    """At most ``rate`` events per second (None: no limit), for a dashboard to watch."""

    def __init__(self, rate: float | None) -> None:
        self.rate = rate
        self.sent = 0
        self.started: float | None = None

    async def __call__(self) -> None:
        if not self.rate:
            return
        now = time.monotonic()
        if self.started is None:
            self.started = now
        self.sent += 1
        ahead = self.sent / self.rate - (now - self.started)
        if ahead > 0.002:
            await asyncio.sleep(ahead)


def _chain_fields(scenario: Scenario, run_id: str, prefix: str) -> dict[str, Any]:
    """The chain fields of a run's first event: a subagent of a delegated scenario names the
    scenario's first run as its parent and root (F6)."""
    root = f"{prefix}-{SCENARIOS.index(scenario)}-000"
    if not scenario.delegated or run_id == root:
        return {}
    return {"parent_run_id": root, "root_run_id": root, "depth": 1}


async def simulate(
    config: FleetConfig,
    seed: int = 7,
    runs_per_scenario: int = 24,
    progress: Progress | None = None,
    view: FleetView | None = None,
    pace: Pace | None = None,
    prefix: str = "demo",
    alerts: list[FleetAlert] | None = None,
) -> list[ScenarioReport]:
    """Run the simulated fleet; one report per scenario (run ids ``<prefix>-<scenario>-<n>``),
    the fleet alerts into ``alerts``. The fleet's clock starts at :data:`DEMO_EPOCH_MS`; the
    outage tool fails for every call between ``OUTAGE_FROM_S`` and ``OUTAGE_UNTIL_S`` on it."""
    pace = pace or Pace(None)
    rnd = random.Random(seed)
    noise = random.Random(seed + 1)  # the outage's request ids: the fleet itself stays as it was
    agents: list[tuple[Scenario, str, list[Step], RunOutcome]] = []
    costs: dict[str, list[float]] = {}  # run id -> the cost of each step's model turn
    for index, scenario in enumerate(SCENARIOS):
        for n in range(runs_per_scenario):
            script = random.Random(rnd.random())
            steps = scenario.script(script)
            run_id = f"{prefix}-{index}-{n:03d}"
            costs[run_id] = [round(script.uniform(0.01, 0.04), 4) for _ in steps]
            agents.append((scenario, run_id, steps, RunOutcome()))
    total = sum(len(steps) for _, _, steps, _ in agents)
    task = progress.add_task("simulated fleet", total=total) if progress else None
    detectors: dict[str, Counter[str]] = {s.name: Counter() for s in SCENARIOS}
    cursor = {run_id: 0 for _, run_id, _, _ in agents}
    # each run's own clock (event ts, ms): an agent turn takes 4-12 s, a tool 0.2-3 s
    clock = {run_id: DEMO_EPOCH_MS for _, run_id, _, _ in agents}
    outage = range(DEMO_EPOCH_MS + OUTAGE_FROM_S * 1000, DEMO_EPOCH_MS + OUTAGE_UNTIL_S * 1000)
    serial = 0
    async with EmbeddedRuntime(config, view=view) as runtime:

        async def process(event: Event) -> list[Output]:
            await pace()
            return await runtime.process(event)

        active = list(agents)
        while active:
            pick = rnd.randrange(len(active))
            scenario, run_id, steps, outcome = active[pick]
            step = steps[cursor[run_id]]
            cursor[run_id] += 1
            serial += 1
            agent = scenario.agent_id
            aborted = False
            clock[run_id] += rnd.randint(4000, 12000)
            if step.compaction:
                await process(
                    CompactionRetry(event_id=f"e{serial}", run_id=run_id, agent_id=agent, ts=clock[run_id])
                )
            else:
                outcome.calls += 1
                call_id = f"{run_id}-c{outcome.calls}"
                cost = costs[run_id][cursor[run_id] - 1]
                tokens = int(cost * 60_000)
                chain = _chain_fields(scenario, run_id, prefix) if outcome.calls == 1 else {}
                outputs = await process(
                    ToolCall(
                        event_id=f"e{serial}c",
                        tool=step.tool,
                        params=step.params,
                        tool_call_id=call_id,
                        run_id=run_id,
                        agent_id=agent,
                        ts=clock[run_id],
                        usage=Usage(input_tokens=tokens, output_tokens=tokens // 20, cost_usd=cost),
                        **chain,
                    )
                )
                aborted = _note(outcome, outputs, detectors[scenario.name])
                outcome.spent_usd += cost
                if outcome.verdicts:
                    outcome.loop_usd += cost
                blocked = any(isinstance(o, Verdict) and o.action == "block" for o in outputs)
                if not blocked and not aborted:
                    clock[run_id] += rnd.randint(200, 3000)
                    error = _error(step, clock[run_id] in outage, noise)
                    result = ToolResult(
                        event_id=f"e{serial}r",
                        tool=step.tool,
                        params=step.params,
                        result=step.result if error is None else UNSET,
                        error=error if error is not None else UNSET,
                        tool_call_id=call_id,
                        run_id=run_id,
                        agent_id=agent,
                        ts=clock[run_id],
                    )
                    aborted = _note(outcome, await process(result), detectors[scenario.name])
            if progress is not None and task is not None:
                progress.advance(task)
            if aborted:
                outcome.saved_usd = sum(costs[run_id][cursor[run_id] :])
            if aborted or cursor[run_id] >= len(steps):
                if progress is not None and task is not None:
                    progress.advance(task, len(steps) - cursor[run_id])
                await process(RunEnd(event_id=f"e{serial}end", run_id=run_id, agent_id=scenario.agent_id))
                active.pop(pick)
        if alerts is not None:
            alerts += runtime.alerts
    reports = []
    for scenario in SCENARIOS:
        outcomes = [o for s, _, _, o in agents if s is scenario]
        reports.append(_summarise(scenario.name, scenario.healthy, outcomes, detectors[scenario.name]))
    return reports


async def replay_traces(
    config: FleetConfig, view: FleetView | None = None, pace: Pace | None = None
) -> list[ScenarioReport]:
    """The bundled real OpenClaw traces, as recorded (the real agents were not stopped)."""
    pace = pace or Pace(None)
    reports = []
    for path in sorted(FIXTURES.glob("*.events.jsonl")):
        outcomes: dict[str, RunOutcome] = {}
        detectors: Counter[str] = Counter()
        with path.open("rb") as stream:
            events = [item for item in read_events(stream, str(path)) if not isinstance(item, BadLine)]
        async with EmbeddedRuntime(config, view=view) as runtime:
            for event in events:
                await pace()
                outcome = outcomes.setdefault(run_scope(event), RunOutcome())
                if isinstance(event, ToolCall):
                    outcome.calls += 1
                _note(outcome, await runtime.process(event), detectors)
        name = "trace: " + path.name.removesuffix(".events.jsonl").removeprefix("openclaw-")
        healthy = not (FIXTURES / path.name.replace(".events.", ".expected.")).read_text().strip()
        reports.append(_summarise(name, healthy, list(outcomes.values()), detectors))
    return reports


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


#: the summary's columns: (header, what it counts), explained under the table
COLUMNS: tuple[tuple[str, str], ...] = (
    ("scenario", ""),
    ("runs", ""),
    ("warn", "runs given a warning"),
    ("block", "runs with a call refused"),
    ("abort", "runs stopped (some rules abort at once: the post-compaction guard)"),
    ("1st\nwarn", "median call of the first warning"),
    ("1st\nblock", "median call of the first block"),
    ("false\nalarm", "healthy runs warned, blocked or stopped (– on stuck scenarios)"),
    ("$\nloops", "spend after a run's first verdict"),
    ("$\nsaved", "spend avoided by stopping runs at their abort (– on traces: no usage recorded)"),
)

NEXT_STEPS = (
    "loopwatch demo --serve               the same fleet on a live dashboard",
    "loopwatch replay ~/.claude/projects  your own agents' history, same rules",
    "loopwatch gateway --config FILE      then a hook (docs/runtimes.md)",
)


def render(
    reports: list[ScenarioReport],
    console: Console,
    seconds: float,
    runs: int,
    alerts: list[FleetAlert] | None = None,
) -> None:
    table = Table(
        title=f"loopwatch demo: {runs} simulated runs at once, and real OpenClaw traces ({seconds:.1f} s)",
        box=box.SIMPLE_HEAD,
        padding=(0, 0, 0, 1),
        pad_edge=False,
    )
    for column, _ in COLUMNS:
        if column == "scenario":
            table.add_column(column, justify="left", overflow="fold", min_width=16)
        else:
            table.add_column(column, justify="right", no_wrap=True)
    for report in reports:
        table.add_row(
            report.name,
            str(report.runs),
            str(report.warned),
            str(report.blocked),
            str(report.aborted),
            _fmt(report.median_calls_to_warning),
            _fmt(report.median_calls_to_block),
            str(report.flagged_healthy) if report.healthy else "–",
            f"{report.loop_usd:.2f}" if report.spent_usd else "–",
            f"{report.saved_usd:.2f}" if report.spent_usd else "–",
        )
    console.print(table)
    for column, meaning in COLUMNS:
        if meaning:
            console.print(f"  {column.replace(chr(10), ' ')}: {meaning}")
    spent = sum(r.spent_usd for r in reports)
    looped, saved = sum(r.loop_usd for r in reports), sum(r.saved_usd for r in reports)
    console.print(
        f"simulated model turns cost ${spent:.2f}; ${looped:.2f} of it went into loops after their first "
        f"verdict; stopping the aborted runs saved ${saved:.2f}",
    )
    flagged = sum(r.flagged_healthy for r in reports)
    missed = [r.name for r in reports if not r.healthy and r.warned + r.blocked + r.aborted == 0]
    console.print(
        f"false alarms on healthy runs: {flagged}; stuck scenarios missed: {len(missed)}"
        + (f" ({', '.join(missed)})" if missed else "")
    )
    if alerts:
        table = Table(
            title=f"fleet alerts: what no single run's detector sees ({len(alerts)})",
            box=box.SIMPLE_HEAD,
            padding=(0, 1),
            pad_edge=False,
        )
        table.add_column("at", justify="right", no_wrap=True)
        table.add_column("kind", justify="left", no_wrap=True)
        table.add_column("message", justify="left", overflow="fold")
        for alert in sorted(alerts, key=lambda a: a.ts):  # runs' clocks differ: by event time
            at = f"+{(alert.ts - DEMO_EPOCH_MS) / 60_000:.1f} min"
            table.add_row(at, alert.kind, alert.message)
        console.print(table)
    console.print("next:")
    for step in NEXT_STEPS:
        console.print(f"  {step}")


def run_demo(args: argparse.Namespace, out: BinaryIO, err: TextIO) -> int:
    try:
        return asyncio.run(_demo(args, out, err))
    except KeyboardInterrupt:
        return 130


async def _demo(args: argparse.Namespace, out: BinaryIO, err: TextIO) -> int:
    given = getattr(args, "config", None)
    config = load_config(given) if given else parse_config_text(DEMO_CONFIG, "the demo's default config")
    serve: str | None = getattr(args, "serve", None)
    rate = getattr(args, "rate", None)
    pace = Pace(rate if rate is not None else (400.0 if serve else None))
    view = FleetView("loopwatch demo (embedded)") if serve else None
    console = report_console(err if args.json else None)
    async with AsyncExitStack() as stack:
        if view is not None and serve is not None:
            await stack.enter_async_context(serving(view, serve, err))
        started = time.perf_counter()
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total}"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        ) as progress:
            alerts: list[FleetAlert] = []
            reports = await simulate(config, args.seed, args.runs, progress, view, pace, alerts=alerts)
            reports += await replay_traces(config, view, pace)
        seconds = time.perf_counter() - started
        if args.json:
            out.write(json.dumps([asdict(r) for r in reports], indent=1).encode() + b"\n")
            out.flush()
        else:
            render(reports, console, seconds, args.runs * len(SCENARIOS), alerts)
        if view is not None:
            rounds = getattr(args, "rounds", 0)
            more = asyncio.create_task(_more_rounds(config, args, view, pace, err, rounds))
            try:
                await serve_until_interrupted(err, "the fleet keeps running" if rounds != 1 else "input done")
            finally:
                more.cancel()
                with suppress(asyncio.CancelledError):
                    await more
    return 0


async def _more_rounds(
    config: FleetConfig, args: argparse.Namespace, view: FleetView, pace: Pace, err: TextIO, rounds: int
) -> None:
    """Further rounds of the simulated fleet (new seeds, new run ids) for the dashboard."""
    number = 2
    while rounds == 0 or number <= rounds:
        seed = args.seed + number - 1
        print(f"loopwatch: demo round {number} (seed {seed})", file=err, flush=True)
        await simulate(config, seed, args.runs, None, view, pace, prefix=f"demo-r{number}")
        number += 1
