"""Drive runs through OpenClaw's shipped detector and loopwatch's core; compare step by step.

Both sides read the same JSON text of every step. loopwatch runs in observe-only mode under
revision 2026-08 with SHA-256 digests (:data:`SETTINGS`): every call is recorded, a critical
blocks nothing, and hashes and warning keys are OpenClaw's byte for byte. Its events go
through the wire decoder (:func:`detectors.decoding.decode_event`) and the engine every
runtime uses (:class:`detectors.engine.Engine`).

What is compared, per call:

* ``argsHash``;
* the **detection**, before any de-duplication: stuck or not, level, detector, count, warning
  key, message, paired tool, liveness signal. OpenClaw's is ``detectToolCallLoop``; loopwatch's
  is :func:`detectors.detection.detect` on the run's history just before the engine takes the
  event (the same function and history ``step.apply`` uses);
* what is **published**: OpenClaw blocks on every critical and warns when its runtime's
  ``shouldEmitLoopWarning`` lets the warning through (buckets of 10 per run-prefixed key);
  loopwatch's engine publishes a ``Verdict`` (action ``block`` or ``warn``) or nothing.
  loopwatch's aborts (a second critical, E1) are not compared: OpenClaw has no such output.

Per outcome: the record it produced (result hash, outcome kind, failure identity, unknown
tool name, no-progress flag), OpenClaw's from ``recordToolCallOutcome``, loopwatch's from
:func:`detectors.step.prepare`.
"""

from __future__ import annotations

import itertools
import json
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from loopwatch.config.fleet import FleetConfig
from loopwatch.config.settings import DetectorSettings
from loopwatch.detectors.decoding import decode_event
from loopwatch.detectors.detection import detect
from loopwatch.detectors.engine import Engine
from loopwatch.detectors.events import Abort, RunEnd, Verdict
from loopwatch.detectors.hashing import digester_for
from loopwatch.detectors.step import prepare
from tests.differential.fleet import NUMBER_MARK, Run, Step
from tests.differential.oracle import OpenClawOracle

__all__ = [
    "CALL_FIELDS",
    "OUTCOME_FIELDS",
    "SETTINGS",
    "Mismatch",
    "Reword",
    "Totals",
    "describe",
    "evaluate",
    "shrink",
]

SETTINGS = DetectorSettings(
    digest="sha256",  # E2: OpenClaw's hashes and warning keys, byte for byte
    observe_only=True,  # every call recorded, nothing blocked (the oracle's contract)
    openclaw_revision="2026-08",  # the rules openclaw@2026.9.6 ships (veto records, exec tail, churn)
    churn_stale_after_s=0,  # loopwatch's own stale-churn abort needs event time; not OpenClaw's
)
CALL_FIELDS = (
    "argsHash",
    "stuck",
    "level",
    "detector",
    "count",
    "warningKey",
    "message",
    "pairedToolName",
    "livenessSignal",
    "published",
)
OUTCOME_FIELDS = ("resultHash", "outcomeKind", "failureIdentityHash", "unknownToolName", "noProgress")

#: ``reword(detector, level, loopwatch message)``: the message OpenClaw's wording would give
Reword = Callable[[str, str, str], str]

_NUMBER = re.compile(r'"(?:\ue000|\\ue000)([-+.0-9eE]+)(?:\ue000|\\ue000)"')
_run_ids = itertools.count()


@dataclass(frozen=True)
class Mismatch:
    """One field of one step that differs; ``detectors``: what each side detected at that
    step (``None``: nothing, or an outcome step)."""

    step: int
    field: str
    openclaw: Any
    loopwatch: Any
    detectors: tuple[str | None, str | None] = (None, None)

    def __str__(self) -> str:
        return f"step {self.step} {self.field}: OpenClaw {self.openclaw!r} / loopwatch {self.loopwatch!r}"


@dataclass
class Totals:
    runs: int = 0
    calls: int = 0
    outcomes: int = 0
    stuck: int = 0  # calls OpenClaw found stuck
    published: int = 0
    #: (detector, level, liveness signal) -> calls OpenClaw gave that detection
    detections: Counter[tuple[str, str, str | None]] = field(default_factory=Counter)


def _json(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    if NUMBER_MARK in text:
        text = _NUMBER.sub(r"\1", text)
    return text


def _ascii(value: Any) -> str:
    return _NUMBER.sub(r"\1", json.dumps(value, separators=(",", ":")))


def _encode_step(
    step: Step, run_id: str, event_id: str, agent: str, config: str | None
) -> tuple[bytes, bytes]:
    """``(OpenClaw line, loopwatch event)`` of one step."""

    def lines(dump: Callable[[Any], str]) -> tuple[str, str]:
        tool, call_id, params = dump(step["tool"]), dump(step["id"]), dump(step["params"])
        ids = f'"run_id":{dump(run_id)},"event_id":{dump(event_id)},"agent_id":{dump(agent)}'
        extra = "" if config is None else f',"config":{config}'
        head = f'{{"run":{dump(run_id)},"tool":{tool},"toolCallId":{call_id},"params":{params}{extra}'
        if step["op"] == "call":
            node = f'{head},"op":"call"}}\n'
            event = f'{{"type":"tool_call",{ids},"tool":{tool},"tool_call_id":{call_id},"params":{params}}}'
            return node, event
        if "result" in step:
            node_out, event_out = f'"result":{dump(step["result"])}', f'"result":{dump(step["result"])}'
        elif "error" in step:
            node_out, event_out = f'"error":{dump(step["error"])}', f'"error":{dump(step["error"])}'
        else:
            value = dump(step["errorValue"])
            node_out, event_out = f'"errorValue":{value}', f'"error":{value}'
        node = f'{head},"op":"outcome",{node_out}}}\n'
        event = (
            f'{{"type":"tool_result",{ids},"tool":{tool},"tool_call_id":{call_id},'
            f'"params":{params},{event_out}}}'
        )
        return node, event

    node, event = lines(_json)
    try:  # a lone surrogate cannot be UTF-8: then every string is written with \u escapes
        return node.encode(), event.encode()
    except UnicodeEncodeError:
        node, event = lines(_ascii)
        return node.encode(), event.encode()


def _agent(config: dict[str, Any]) -> str:
    return "cfg:" + json.dumps(config, sort_keys=True)


def _openclaw_call(answer: dict[str, Any]) -> tuple[Any, ...]:
    published = None
    if "e" in answer:
        published = (answer["e"], answer["l"], answer["d"], answer["c"], answer["k"], answer["m"])
    return (
        answer["h"],
        answer["s"],
        answer.get("l"),
        answer.get("d"),
        answer.get("c"),
        answer.get("k"),
        answer.get("m"),
        answer.get("p"),
        answer.get("v"),
        published,
    )


def _openclaw_outcome(answer: dict[str, Any]) -> tuple[Any, ...]:
    return (answer.get("r"), answer.get("o"), answer.get("f"), answer.get("u"), answer.get("n", False))


class _Loopwatch:
    """loopwatch's observations of a batch of runs (one engine, observe-only)."""

    def __init__(self, configs: list[dict[str, Any]], reword: Reword) -> None:
        blocks = {_agent(config): config for config in configs}
        self.config = FleetConfig(global_block=None, agent_blocks=blocks, settings=SETTINGS)
        self.engine = Engine(self.config, ended_limit=0)
        self.digester = digester_for(SETTINGS.digest)
        self.reword = reword

    def run(self, run_id: str, agent: str, steps: list[Step], events: list[bytes]) -> list[tuple[Any, ...]]:
        engine, digester, reword = self.engine, self.digester, self.reword
        resolved = self.config.for_agent(agent)
        send_tools = SETTINGS.provider_send_tools
        observed: list[tuple[Any, ...]] = []
        for step, line in zip(steps, events, strict=True):
            event = decode_event(line)
            prepared = prepare(event, digester, send_tools, resolved.revision)  # type: ignore[arg-type]
            if step["op"] != "call":
                engine.process(event)
                observed.append(
                    (
                        prepared.result_hash,
                        prepared.kind,
                        prepared.failure_id,
                        prepared.unknown_tool_name,
                        prepared.no_progress,
                    )
                )
                continue
            state = engine.states.get(run_id)
            found = None
            if state is not None:
                found = detect(state.history, step["tool"], prepared.args_hash, prepared.known_poll, resolved)
            outputs = engine.process(event)
            published = None
            for output in outputs:
                if type(output) is Verdict:
                    message = reword(output.detector, output.level, output.message)
                    published = (
                        output.action,
                        output.level,
                        output.detector,
                        output.count,
                        output.warning_key,
                        message,
                    )
                elif type(output) is Abort and output.enforced:
                    raise AssertionError(f"an enforced abort in observe-only mode: {output}")
            if found is None:
                observed.append(
                    (prepared.args_hash, False, None, None, None, None, None, None, None, published)
                )
            else:
                observed.append(
                    (
                        prepared.args_hash,
                        True,
                        found.level,
                        found.detector,
                        found.count,
                        found.warning_key,
                        reword(found.detector, found.level, found.message),
                        found.paired_tool,
                        found.liveness_signal,
                        published,
                    )
                )
        engine.process(RunEnd(event_id=f"{run_id}.end", run_id=run_id))
        return observed


def _compare(
    steps: list[Step],
    openclaw: list[tuple[Any, ...]],
    loopwatch: list[tuple[Any, ...]],
    totals: Totals | None,
) -> list[Mismatch]:
    mismatches: list[Mismatch] = []
    for index, (step, theirs, ours) in enumerate(zip(steps, openclaw, loopwatch, strict=True)):
        is_call = step["op"] == "call"
        if totals is not None:
            if is_call:
                totals.calls += 1
                if theirs[1] is True:
                    totals.stuck += 1
                    totals.detections[(theirs[3], theirs[2], theirs[8])] += 1
                totals.published += theirs[9] is not None
            else:
                totals.outcomes += 1
        if theirs == ours:
            continue
        names = CALL_FIELDS if is_call else OUTCOME_FIELDS
        detectors = (theirs[3], ours[3]) if is_call else (None, None)
        for name, a, b in zip(names, theirs, ours, strict=True):
            if a != b:
                mismatches.append(Mismatch(index, name, a, b, detectors))
    return mismatches


def evaluate(
    oracle: OpenClawOracle, runs: list[Run], reword: Reword, totals: Totals | None = None
) -> list[list[Mismatch]]:
    """The mismatches of each run (an empty list: the run agrees step by step)."""
    node_lines: list[bytes] = []
    encoded: list[tuple[str, str, list[bytes]]] = []
    for run in runs:
        run_id = f"r{next(_run_ids)}"
        agent = _agent(run.config)
        config = json.dumps(run.config)
        events: list[bytes] = []
        for index, step in enumerate(run.steps):
            node, event = _encode_step(
                step, run_id, f"{run_id}.{index}", agent, config if index == 0 else None
            )
            node_lines.append(node)
            events.append(event)
        node_lines.append(f'{{"run":"{run_id}","op":"end"}}\n'.encode())
        encoded.append((run_id, agent, events))
    pending = oracle.submit(node_lines)  # OpenClaw works while loopwatch does
    side = _Loopwatch([run.config for run in runs], reword)
    ours = [
        side.run(run_id, agent, run.steps, events)
        for run, (run_id, agent, events) in zip(runs, encoded, strict=True)
    ]
    answers = iter(pending.result())
    results: list[list[Mismatch]] = []
    for run, observed in zip(runs, ours, strict=True):
        theirs = [
            _openclaw_call(answer) if step["op"] == "call" else _openclaw_outcome(answer)
            for step, answer in zip(run.steps, answers, strict=False)  # answers: the whole batch
        ]
        next(answers)  # the run's end
        if totals is not None:
            totals.runs += 1
        results.append(_compare(run.steps, theirs, observed, totals))
    return results


def shrink(run: Run, fails: Callable[[list[Run]], list[bool]], max_rounds: int = 200) -> Run:
    """The smallest run found that still fails: steps dropped in chunks, halving the chunk
    size when no chunk can go (all candidates of a round are evaluated in one batch)."""
    steps = run.steps
    chunk = max(1, len(steps) // 2)
    for _ in range(max_rounds):
        candidates = [steps[:start] + steps[start + chunk :] for start in range(0, len(steps), chunk)]
        verdicts = fails([run.with_steps(candidate, "-shrunk") for candidate in candidates])
        failing = next((candidate for candidate, bad in zip(candidates, verdicts, strict=True) if bad), None)
        if failing is not None:
            steps = failing
            chunk = min(chunk, max(1, len(steps) // 2))
        elif chunk > 1:
            chunk //= 2
        else:
            break
    return run.with_steps(steps, "-shrunk")


def _short(value: Any, limit: int = 160) -> str:
    text = json.dumps(value, ensure_ascii=True)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} chars)"


def describe(run: Run, mismatches: list[Mismatch]) -> str:
    """A run and its mismatches, readable (long payloads cut)."""
    lines = [
        f"run {run.name} config {json.dumps(run.config)} segments {run.segments} ({len(run.steps)} steps):"
    ]
    flagged = {mismatch.step for mismatch in mismatches}
    for index, step in enumerate(run.steps):
        mark = ">>" if index in flagged else "  "
        lines.append(f"{mark} {index:3d} {_short(step)}")
    lines.extend(f"   {mismatch}" for mismatch in mismatches)
    return "\n".join(lines)


def chunked(runs: list[Run], size: int) -> Iterator[list[Run]]:
    for start in range(0, len(runs), size):
        yield runs[start : start + size]
