"""Wire events and verdicts (DESIGN §2): frozen, keyword-only msgspec Structs tagged by ``type``.

Inputs: :class:`ToolCall`, :class:`ToolResult`, :class:`CompactionRetry`, :class:`RunEnd`.
Outputs: :class:`Verdict` (warn/block) and :class:`Abort`. Unknown fields are ignored;
missing required fields, wrong types and contradictory fields make an event invalid
(:class:`InvalidEvent` says what and where).

Numbers inside ``params``, ``result`` and ``error`` are decoded with JavaScript's value
(see :mod:`detectors.stable_json`), so hashing needs no second pass over them. A decoded
event keeps ``params`` and ``result`` as their JSON text (``msgspec.Raw``, hashed without
building the value: :mod:`detectors.raw_json`; :func:`~detectors.stable_json.plain` gives the
value); an event made in Python holds the values themselves. Every reader takes both.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal

import msgspec
from msgspec import UNSET, UnsetType

from loopwatch.config.errors import LoopwatchError
from loopwatch.detectors.stable_json import encodable, wire_enc_hook

if TYPE_CHECKING:
    JsonValue = Any
else:  # msgspec keeps the value's text, checked by decoding.decode_event
    JsonValue = msgspec.Raw

__all__ = [
    "EXPIRY_EVENT_PREFIX",
    "Abort",
    "Action",
    "CompactionRetry",
    "Event",
    "InvalidEvent",
    "Level",
    "Output",
    "RunEnd",
    "ToolCall",
    "ToolResult",
    "Usage",
    "Verdict",
    "VerdictAction",
    "as_usage",
    "chain_of",
    "encode_event",
    "encode_output",
    "run_scope",
    "shape_of",
]


class InvalidEvent(LoopwatchError):
    """An input record that is not a valid event; ``reason`` says what and where."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class _Base(msgspec.Struct, kw_only=True, frozen=True, tag_field="type"):
    event_id: str
    run_id: str | None = None
    session_id: str | None = None
    agent_id: str = "default"
    ts: int | None = None
    # the delegation chain (BEYOND-OPENCLAW F6): a run's first event fixes it; absent on the
    # wire when not given
    parent_run_id: str | UnsetType = UNSET
    root_run_id: str | UnsetType = UNSET
    depth: Annotated[int, msgspec.Meta(ge=0, le=1_000_000)] | UnsetType = UNSET


class Usage(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """What the model turn that proposed a call cost (on the turn's first call only)."""

    input_tokens: Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)] = 0
    output_tokens: Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)] = 0
    cost_usd: Annotated[float, msgspec.Meta(ge=0, le=1e9)] = 0.0


def as_usage(value: Usage | dict[str, Any] | None) -> Usage | None:
    """A :class:`Usage` from itself or a dict; :class:`InvalidEvent` says what is wrong."""
    if value is None or isinstance(value, Usage):
        return value
    try:
        return msgspec.convert(value, Usage)
    except msgspec.ValidationError as exc:
        raise InvalidEvent(f"usage: {exc}") from exc


class ToolCall(_Base, frozen=True, tag="tool_call"):
    """A tool is about to execute. Send ``params``, or ``args_digest`` (digest-only mode)."""

    tool: str
    params: JsonValue = UNSET
    args_digest: str | UnsetType = UNSET
    known_poll: bool | UnsetType = UNSET
    tool_call_id: str | None = None
    usage: Usage | None = None
    # the calls of one model turn share it (batch admission, openclaw-rules §7.6); absent on
    # the wire when not given
    batch_id: str | UnsetType = UNSET


class ToolResult(_Base, frozen=True, tag="tool_result"):
    """A tool returned (``result``) or raised (``error``); or digests of that outcome."""

    tool: str
    params: JsonValue = UNSET
    args_digest: str | UnsetType = UNSET
    result: JsonValue = UNSET
    error: Any = UNSET
    result_digest: str | UnsetType | None = UNSET
    unknown_tool_name: str | None = None
    tool_call_id: str | None = None
    # digest-only outcomes under revision 2026-08 (what ``hash_outcome`` classified)
    outcome_kind: Literal["tool-loop-veto", "terminal-exec-failure"] | None = None
    no_progress: bool = False
    failure_digest: str | None = None


class CompactionRetry(_Base, frozen=True, tag="compaction_retry"):
    """A compaction after a context overflow succeeded and the run retries (arms the guard)."""


class RunEnd(_Base, frozen=True, tag="run_end"):
    """The run finished; its state can be dropped."""


#: Event ids of the ``run_end`` records a worker sends for runs idle past the state TTL: such
#: a run is forgotten without a tombstone, so a session that resumes later starts afresh.
EXPIRY_EVENT_PREFIX: Final = "loopwatch-expiry:"


Event = ToolCall | ToolResult | CompactionRetry | RunEnd


#: a verdict's level, and what it asks: a warning warns, a critical blocks (``enforced``)
Level = Literal["warning", "critical"]
VerdictAction = Literal["warn", "block"]
#: what to do with a call: the action of a verdict, ``abort`` for an abort, else ``allow``
Action = Literal["allow", "warn", "block", "abort"]


class Verdict(msgspec.Struct, kw_only=True, frozen=True, tag="verdict", tag_field="type"):
    """A warning or a block for one proposed tool call."""

    verdict_id: str
    run_id: str | None
    agent_id: str
    session_id: str | None
    tool_call_id: str | None
    trigger_event_id: str
    level: Level
    action: VerdictAction
    detector: str
    count: int
    message: str
    warning_key: str
    paired_tool: str | None
    tool: str
    ts: int | None
    enforced: bool = True
    liveness_signal: str | None = None


class Abort(msgspec.Struct, kw_only=True, frozen=True, tag="abort", tag_field="type"):
    """The run must stop (recovery exhausted, or a loop that survived compaction)."""

    verdict_id: str
    run_id: str | None
    agent_id: str
    session_id: str | None
    trigger_event_id: str
    reason: str
    tool: str
    count: int | None
    message: str
    ts: int | None
    enforced: bool = True

    # one vocabulary with verdicts: an abort is critical, its action ``abort``, its detector
    # the reason (not on the wire: these are the reason's other names)
    @property
    def detector(self) -> str:
        return self.reason

    @property
    def level(self) -> Level:
        return "critical"

    @property
    def action(self) -> Action:
        return "abort"


Output = Verdict | Abort

_ENCODER: Final = msgspec.json.Encoder(enc_hook=wire_enc_hook)


def run_scope(event: Event) -> str:
    """The Kafka key and state key: ``run_id``, else ``session:<session_id>``."""
    run_id = event.run_id.strip() if event.run_id else ""
    if run_id:
        return run_id
    return f"session:{(event.session_id or '').strip()}"


def shape_of(output: Output) -> tuple[Level, str, Action]:
    """``(level, detector, action)`` of a verdict or an abort (``critical``, reason, ``abort``)."""
    return output.level, output.detector, output.action


def chain_of(event: Event) -> tuple[str, str, int] | None:
    """``(parent, root, depth)`` of a run whose first event is ``event``; None for a root run.

    Without ``parent_run_id`` the run is a root (whatever the other two say); with one, a
    missing ``root_run_id`` is the parent and a missing ``depth`` is 1 (F6's wire rule)."""
    parent = event.parent_run_id
    if parent is UNSET or not parent:
        return None
    root = event.root_run_id if event.root_run_id is not UNSET and event.root_run_id else parent
    depth = event.depth if event.depth is not UNSET else 1
    return parent, root, depth


def encode_output(output: Output) -> bytes:
    """One verdict or abort as compact JSON."""
    return _ENCODER.encode(output)


def encode_event(event: Event) -> bytes:
    """One event as wire JSON (absent optional fields omitted).

    A lone UTF-16 surrogate in ``params``, ``result`` or ``error`` (valid there: JavaScript
    writes them, and OpenClaw sanitises them before hashing) is written as its JSON escape, so
    the event decodes back to the same values."""
    try:
        return _ENCODER.encode(event)
    except UnicodeEncodeError:  # msgspec writes only valid Unicode
        changes = {}
        for name in ("params", "result", "error"):
            value = getattr(event, name, UNSET)
            if value is not UNSET:
                changes[name] = _escaped(value)
        return _ENCODER.encode(msgspec.structs.replace(event, **changes))


def _escaped(value: Any) -> Any:
    """``value`` with each string and object holding a lone surrogate as its JSON text."""
    if type(value) is str:
        return value if encodable(value) else msgspec.Raw(json.dumps(value).encode())
    if isinstance(value, (list, tuple, set, frozenset)):  # (as msgspec writes them: arrays)
        return [_escaped(item) for item in value]
    if type(value) is dict:
        if all(type(key) is not str or encodable(key) for key in value):
            return {key: _escaped(item) for key, item in value.items()}
        members = [
            json.dumps(key if type(key) is str else str(key)).encode()
            + b":"
            + _ENCODER.encode(_escaped(item))
            for key, item in value.items()
        ]
        return msgspec.Raw(b"{" + b",".join(members) + b"}")
    return value
