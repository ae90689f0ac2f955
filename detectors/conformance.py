"""Runs conformance vectors in the step vocabulary of spec §0 against the core.

A vector is one session: a set of run scopes (loopwatch D2), one per run id plus one for
calls without a run id, driven with SHA-256 digests so warning keys compare byte for byte.
The vector's ``profile`` names its rule revision (:data:`PROFILE_REVISIONS`): ``loopwatch``
runs under 2026-05, ``loopwatch-newest`` under 2026-08; any other profile is a failure.
``call``/``outcome``/``record``/``check`` use the history and detection functions directly;
``invoke`` goes through :func:`detectors.step.apply`, the step every runtime uses, and
``invoke_batch`` (one model turn's calls, openclaw-rules §7.6) through
:func:`detectors.batch_admission.admit_batch`.

Anything the runner cannot evaluate (an unknown op, an unknown expectation key, a malformed
step) is a failure, never a pass.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loopwatch.config.fleet import FleetConfig
from loopwatch.config.loop_detection import merge_agent, resolve
from loopwatch.config.settings import DetectorSettings, Revision
from loopwatch.detectors.batch_admission import BatchOutcome, admit_batch
from loopwatch.detectors.detection import Detection, detect
from loopwatch.detectors.events import ToolCall, Verdict
from loopwatch.detectors.hashing import digester_for
from loopwatch.detectors.history import Record
from loopwatch.detectors.outcomes import MISSING, ErrorMessage, hash_outcome, is_known_poll
from loopwatch.detectors.rules.post_compaction_guard import GuardVerdict, guard_of
from loopwatch.detectors.state import RunState
from loopwatch.detectors.step import Prepared, apply, record_outcome

__all__ = ["PROFILE_REVISIONS", "VectorFailure", "run_vector"]

#: vector profile -> ``openclawRevision`` it is written for
PROFILE_REVISIONS: dict[str, Revision] = {"loopwatch": "2026-05", "loopwatch-newest": "2026-08"}

_AGENT = "vector-agent"
_NO_RUN = "\x00no-run"


@dataclass(frozen=True, slots=True)
class VectorFailure:
    """Why a vector failed: the step (0-based, with repetition) and the reason."""

    step: int | None
    reason: str

    def __str__(self) -> str:
        where = f"step {self.step}" if self.step is not None else "vector"
        return f"{where}: {self.reason}"


class _Fail(Exception):
    pass


def _template(value: Any, index: int) -> Any:
    if isinstance(value, str):
        return value.replace("{i}", str(index))
    if isinstance(value, list):
        return [_template(item, index) for item in value]
    if isinstance(value, dict):
        return {key: _template(item, index) for key, item in value.items()}
    return value


class _Session:
    def __init__(self, vector: dict[str, Any]) -> None:
        env = vector.get("env") or {}
        if not isinstance(env, dict):
            raise _Fail("env must be an object")
        send_tools = env.get("providerSendTools") or []
        profile = vector.get("profile", "loopwatch")
        revision = PROFILE_REVISIONS.get(profile) if isinstance(profile, str) else None
        if revision is None:
            known = ", ".join(PROFILE_REVISIONS)
            raise _Fail(f"profile {profile!r} is not one loopwatch implements ({known})")
        settings = DetectorSettings(
            digest="sha256", provider_send_tools=frozenset(send_tools), openclaw_revision=revision
        )
        config = vector.get("config")
        agent = vector.get("agentConfig")
        for name, block in (("config", config), ("agentConfig", agent)):
            if block is not None and not isinstance(block, dict):
                raise _Fail(f"{name} must be an object")
        self.fleet = FleetConfig(config, {_AGENT: agent} if agent is not None else {}, settings)
        self.raw_block = merge_agent(config, agent)
        self.resolved = self.fleet.for_agent(_AGENT)
        self.settings = settings
        self.digester = digester_for("sha256")
        self.scopes: dict[str, RunState] = {}
        self.order: list[tuple[str, Record]] = []
        self.events = 0
        self.batches = 0

    # -- plumbing ------------------------------------------------------------------------

    def scope(self, run_id: object) -> tuple[str, RunState]:
        key = run_id.strip() if isinstance(run_id, str) and run_id.strip() else _NO_RUN
        state = self.scopes.get(key)
        if state is None:
            run = None if key == _NO_RUN else key
            state = self.scopes[key] = RunState(key, _AGENT, run, None)
        return key, state

    def track(self, key: str, state: RunState, before: int) -> None:
        """Remember records appended since ``before`` (a sequence number) in session order."""
        fresh = [record for record in state.history.records if record.seq >= before]
        self.order.extend((key, record) for record in fresh)

    def event_id(self) -> str:
        self.events += 1
        return f"vector-event-{self.events}"

    def prepared(self, step: dict[str, Any], with_outcome: bool) -> Prepared:
        tool, params = _tool_params(step)
        args_hash = self.digester.args_hash(tool, params)
        if not with_outcome:
            return Prepared(args_hash, is_known_poll(tool, params))
        error: Any = MISSING
        if "errorValue" in step:
            error = step["errorValue"]
        elif isinstance(step.get("error"), str):
            error = ErrorMessage(step["error"])
        elif step.get("error") is not None:
            raise _Fail("error must be a string or null")
        result = step.get("result", MISSING)
        outcome = hash_outcome(
            tool,
            params,
            result,
            error,
            self.digester,
            self.settings.provider_send_tools,
            self.resolved.revision,
        )
        return Prepared.outcome(args_hash, outcome)

    def op_invoke_batch(self, step: dict[str, Any]) -> dict[str, Any]:
        """The calls of one model turn admitted or refused together (openclaw-rules §7.6),
        through :func:`detectors.batch_admission.admit_batch`, the core every runtime's batch
        goes through; an admitted batch's calls then ran: their given outcomes are recorded in
        the batch's order (a refused batch ran nothing)."""
        calls = step.get("calls")
        if not isinstance(calls, list) or not calls or not all(isinstance(call, dict) for call in calls):
            raise _Fail("invoke_batch: calls must be a non-empty list of objects")
        key, state = self.scope(step.get("runId"))
        before = _max_seq(state)
        run_id = None if key == _NO_RUN else key
        self.batches += 1
        events: list[ToolCall] = []
        prepared: list[Prepared | None] = []
        for call in calls:
            tool, params = _tool_params(call)
            prepared.append(self.prepared(call, with_outcome=False))
            events.append(
                ToolCall(
                    event_id=self.event_id(),
                    run_id=run_id,
                    session_id="vector-session",
                    agent_id=_AGENT,
                    tool=tool,
                    params=params,
                    tool_call_id=_call_id(call),
                    batch_id=f"vector-batch-{self.batches}",
                )
            )
        outcome = admit_batch(state, events, self.fleet, prepared)
        observed = [_batch_call_dict(outcome, index) for index in range(len(calls))]
        if not outcome.refused:
            for call in calls:
                if any(field in call for field in ("result", "error", "errorValue")):
                    tool, _ = _tool_params(call)
                    outcome_hashes = self.prepared(call, with_outcome=True)
                    record_outcome(state, tool, _call_id(call), None, outcome_hashes, self.resolved)
        self.track(key, state, before)
        return {"refused": outcome.refused, "refusedBy": outcome.refused_by, "calls": observed}

    def history(self) -> list[tuple[str, Record]]:
        live = {id(record) for state in self.scopes.values() for record in state.history.records}
        return [(key, record) for key, record in self.order if id(record) in live]

    # -- operations ----------------------------------------------------------------------

    def op_call(self, step: dict[str, Any]) -> None:
        key, state = self.scope(step.get("runId"))
        before = _max_seq(state)
        tool, _ = _tool_params(step)
        prepared = self.prepared(step, with_outcome=False)
        state.history.append(
            tool, prepared.args_hash, _call_id(step), None, None, None, self.resolved.history_size
        )
        self.track(key, state, before)

    def op_outcome(self, step: dict[str, Any]) -> GuardVerdict | None:
        key, state = self.scope(step.get("runId"))
        before = _max_seq(state)
        tool, _ = _tool_params(step)
        prepared = self.prepared(step, with_outcome=True)
        verdict = record_outcome(state, tool, _call_id(step), None, prepared, self.resolved)
        self.track(key, state, before)
        return verdict

    def op_check(self, step: dict[str, Any]) -> Detection | None:
        _, state = self.scope(step.get("runId"))
        tool, params = _tool_params(step)
        prepared = self.prepared(step, with_outcome=False)
        return detect(state.history, tool, prepared.args_hash, is_known_poll(tool, params), self.resolved)

    def op_invoke(self, step: dict[str, Any]) -> dict[str, Any]:
        key, state = self.scope(step.get("runId"))
        before = _max_seq(state)
        tool, params = _tool_params(step)
        call = self.prepared(step, with_outcome=False)
        # detection is pure: run it here to see the action (a withheld warning is not in the outputs),
        # then let the real step do the same detection and everything after it
        found = detect(state.history, tool, call.args_hash, call.known_poll, self.resolved)
        run_id = None if key == _NO_RUN else key
        outputs = apply(
            state,
            ToolCall(
                event_id=self.event_id(),
                run_id=run_id,
                session_id="vector-session",
                agent_id=_AGENT,
                tool=tool,
                params=params,
                tool_call_id=_call_id(step),
            ),
            self.fleet,
            call,
        )
        verdicts = [out for out in outputs if isinstance(out, Verdict)]
        observed: dict[str, Any] = {"action": "allow"}
        guard: GuardVerdict | None = None
        if found is not None:
            observed.update(
                action="block" if found.critical else "warn",
                detector=found.detector,
                count=found.count,
                message=found.message,
                emitted=bool(verdicts),
                livenessSignal=found.liveness_signal,
            )
        if found is None or not found.critical:
            outcome = self.prepared(step, with_outcome=True)
            guard = record_outcome(state, tool, _call_id(step), None, outcome, self.resolved)
        self.track(key, state, before)
        observed["guard"] = (guard or GuardVerdict(False, guard_of(state).armed)).as_dict()
        return observed


def _max_seq(state: RunState) -> int:
    records = state.history.records
    return records[-1].seq + 1 if records else 0


def _tool_params(step: dict[str, Any]) -> tuple[str, Any]:
    tool = step.get("tool")
    if not isinstance(tool, str) or "params" not in step:
        raise _Fail("step needs a string tool and params")
    return tool, step["params"]


def _call_id(step: dict[str, Any]) -> str | None:
    value = step.get("toolCallId")
    return value if isinstance(value, str) else None


def _compare(what: str, expected: dict[str, Any], observed: dict[str, Any], allowed: set[str]) -> None:
    for key, want in expected.items():
        if key not in allowed:
            raise _Fail(f"{what}: cannot evaluate expectation key {key!r}")
        if key not in observed:
            raise _Fail(f"{what}: expected {key}={want!r}, but there is no such value")
        got = observed[key]
        if isinstance(want, dict) and isinstance(got, dict):
            _compare(f"{what}.{key}", want, got, set(want))
        elif got != want or type(got) is not type(want):
            raise _Fail(f"{what}: expected {key}={want!r}, got {got!r}")


def _detection_dict(found: Detection | None) -> dict[str, Any]:
    if found is None:
        return {"stuck": False}
    observed: dict[str, Any] = {
        "stuck": True,
        "level": found.level,
        "detector": found.detector,
        "count": found.count,
        "message": found.message,
        "warningKey": found.warning_key,
    }
    if found.paired_tool is not None:
        observed["pairedToolName"] = found.paired_tool
    observed["livenessSignal"] = found.liveness_signal
    return observed


_CHECK_KEYS = {
    "stuck",
    "level",
    "detector",
    "count",
    "message",
    "warningKey",
    "pairedToolName",
    "livenessSignal",
}
_INVOKE_KEYS = {"action", "detector", "count", "message", "emitted", "guard", "livenessSignal"}
_BATCH_KEYS = {"refused", "refusedBy", "calls"}
_BATCH_CALL_KEYS = {
    "action",
    "evaluated",
    "stuck",
    "level",
    "detector",
    "count",
    "message",
    "emitted",
    "livenessSignal",
}


def _batch_call_dict(outcome: BatchOutcome, index: int) -> dict[str, Any]:
    """What one call of a batch got: ``action`` (what the runtime does with it: ``block`` for
    every call of a refused batch), whether it was ``evaluated``, whether it was ``stuck``,
    and its own verdict's fields (published or not: ``emitted``) when it had one."""
    found = outcome.found[index]
    if outcome.refused:
        action = "block"
    elif found is None:
        action = "allow"
    else:
        action = "block" if found.critical else "warn"
    observed: dict[str, Any] = {
        "action": action,
        "evaluated": outcome.evaluated[index],
        "stuck": found is not None,
    }
    if found is not None:
        observed.update(
            level=found.level,
            detector=found.detector,
            count=found.count,
            message=found.message,
            emitted=any(isinstance(output, Verdict) for output in outcome.outputs[index]),
            livenessSignal=found.liveness_signal,
        )
    return observed


def _compare_batch(expect: dict[str, Any], observed: dict[str, Any]) -> None:
    calls = expect.get("calls")
    _compare("invoke_batch", {k: v for k, v in expect.items() if k != "calls"}, observed, _BATCH_KEYS)
    if calls is None:
        return
    got = observed["calls"]
    if not isinstance(calls, list) or len(calls) != len(got):
        raise _Fail(f"invoke_batch: expect.calls must list one expectation per call ({len(got)})")
    for index, (want, seen) in enumerate(zip(calls, got, strict=True)):
        if not isinstance(want, dict):
            raise _Fail(f"invoke_batch: expect.calls[{index}] must be an object")
        _compare(f"invoke_batch call {index}", want, seen, _BATCH_CALL_KEYS)


_CONFIG_KEYS = {
    "enabled",
    "historySize",
    "warningThreshold",
    "unknownToolThreshold",
    "criticalThreshold",
    "globalCircuitBreakerThreshold",
    "detectors",
    "postCompactionGuard",
}


def _assert_history(session: _Session, expect: dict[str, Any]) -> None:
    entries = session.history()
    allowed = {
        "length",
        "entries",
        "sameResultHash",
        "differentResultHash",
        "sameArgsHash",
        "differentArgsHash",
    }
    for key in expect:
        if key not in allowed:
            raise _Fail(f"assert_history: cannot evaluate expectation key {key!r}")
    if "length" in expect and len(entries) != expect["length"]:
        raise _Fail(f"assert_history: expected length {expect['length']}, got {len(entries)}")

    def at(index: object) -> tuple[str, Record]:
        if not isinstance(index, int) or not -len(entries) <= index < len(entries):
            raise _Fail(f"assert_history: no entry at index {index!r} (length {len(entries)})")
        return entries[index]

    for spec in expect.get("entries", []):
        _check_entry(session, spec, at)
    _check_groups(expect, at)


def _check_entry(session: _Session, spec: object, at: Callable[[object], tuple[str, Record]]) -> None:
    if not isinstance(spec, dict) or "index" not in spec:
        raise _Fail("assert_history: an entry expectation needs an index")
    key, record = at(spec["index"])
    observed: dict[str, Any] = {
        "toolCallId": record.tool_call_id,
        "runId": None if key == _NO_RUN else key,
        "toolName": record.tool,
        "unknownToolName": record.unknown_tool_name,
        "hasResultHash": record.result_hash is not None,
        "outcomeKind": record.kind,
    }
    for field, want in spec.items():
        if field == "index":
            continue
        if field == "argsOf":
            if not isinstance(want, dict):
                raise _Fail("assert_history: argsOf must be an object")
            wanted = session.digester.args_hash(*_tool_params(want))
            if record.args_hash != wanted:
                raise _Fail(f"assert_history: entry {spec['index']} has other arguments")
            continue
        if field not in observed:
            raise _Fail(f"assert_history: cannot evaluate entry field {field!r}")
        if observed[field] != want:
            raise _Fail(
                f"assert_history: entry {spec['index']} {field}: expected {want!r}, got {observed[field]!r}"
            )


def _check_groups(expect: dict[str, Any], at: Callable[[object], tuple[str, Record]]) -> None:
    for name, attr, same in (
        ("sameResultHash", "result_hash", True),
        ("differentResultHash", "result_hash", False),
        ("sameArgsHash", "args_hash", True),
        ("differentArgsHash", "args_hash", False),
    ):
        for group in expect.get(name, []):
            values = [getattr(at(index)[1], attr) for index in group]
            if any(value is None for value in values):
                raise _Fail(f"assert_history: {name} {group}: an entry has no such hash")
            if same and len(set(values)) != 1:
                raise _Fail(f"assert_history: {name} {group}: hashes differ")
            if not same and len(set(values)) != len(values):
                raise _Fail(f"assert_history: {name} {group}: hashes are not pairwise distinct")


def _run_step(session: _Session, step: dict[str, Any]) -> None:
    op = step.get("op")
    expect = step.get("expect")
    if expect is not None and not isinstance(expect, dict):
        raise _Fail("expect must be an object")
    expect = expect or {}
    if op == "call":
        if expect:
            raise _Fail("call: cannot evaluate expectations")
        session.op_call(step)
    elif op in ("outcome", "record"):
        if op == "record":
            session.op_call(step)
        guard = session.op_outcome(step)
        _, state = session.scope(step.get("runId"))
        observed = (guard or GuardVerdict(False, guard_of(state).armed)).as_dict()
        _compare(op, expect, {"guard": observed}, {"guard"})
    elif op == "check":
        _compare("check", expect, _detection_dict(session.op_check(step)), _CHECK_KEYS)
    elif op == "invoke":
        _compare("invoke", expect, session.op_invoke(step), _INVOKE_KEYS)
    elif op == "invoke_batch":
        _compare_batch(expect, session.op_invoke_batch(step))
    elif op == "compaction_retry":
        if expect:
            raise _Fail("compaction_retry: cannot evaluate expectations")
        _, state = session.scope(step.get("runId"))
        if session.resolved.guard_enabled:
            guard_of(state).arm(session.resolved.guard_window)
    elif op == "assert_resolved_config":
        _compare("assert_resolved_config", expect, resolve(session.raw_block).as_openclaw(), _CONFIG_KEYS)
    elif op == "assert_history":
        _assert_history(session, expect)
    else:
        raise _Fail(f"unknown op {op!r}")


def run_vector(vector: object) -> VectorFailure | None:
    """Run one vector; ``None`` if it passed, else the first failure."""
    if not isinstance(vector, dict) or not isinstance(vector.get("steps"), list):
        return VectorFailure(None, "malformed vector: needs a list of steps")
    try:
        session = _Session(vector)
    except _Fail as exc:
        return VectorFailure(None, str(exc))
    for index, step in enumerate(vector["steps"]):
        if not isinstance(step, dict):
            return VectorFailure(index, "malformed step: not an object")
        repeat = step.get("repeat", 1)
        if not isinstance(repeat, int) or isinstance(repeat, bool) or repeat < 1:
            return VectorFailure(index, "malformed step: repeat must be a positive integer")
        for rep in range(repeat):
            expanded = {
                key: (value if key == "expect" else _template(value, rep))
                for key, value in step.items()
                if key != "repeat"
            }
            try:
                _run_step(session, expanded)
            except _Fail as exc:
                suffix = f" (repetition {rep})" if repeat > 1 else ""
                return VectorFailure(index, f"{exc}{suffix}")
            except Exception as exc:  # noqa: BLE001 - a crash is reported as a failure
                return VectorFailure(index, f"crashed: {type(exc).__name__}: {exc}")
    return None
