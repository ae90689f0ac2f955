"""The ``fleet_alert`` record of the ``loopwatch.alerts`` topic (spec BEYOND-OPENCLAW F0, F6).

Its Kafka key is the subject (``tool:{tool}``, ``agent:{agent}:tool:{tool}:{detector}``,
``chain:{root}`` or ``chain:{root}:{tool}:{h12}``); ``alert_id`` is deterministic, so
replaying the same events gives the same ids and a re-published alert is recognisable as the
same one. Fields a kind does not use are null (a chain's runaway names no tool).
``chain_expired`` (subject ``chain:{root}``, ``ts`` = the chain's last event time) says that a
chain with alerts expired: its alerts are closed and its blocks end. ``chain_active`` (same
subject, ``ts`` = the chain's last event time) is bookkeeping, not an alert: a chain with alerts
published how recent its last event is, so that every runtime ends its blocks at the same time.
"""

from __future__ import annotations

import time
from typing import Any, Final, Literal

import msgspec

__all__ = [
    "FleetAlert",
    "alert_id",
    "decode_alert",
    "encode_alert",
    "format_since",
]

AlertKind = Literal[
    "tool_outage",
    "tool_recovered",
    "systemic_loop",
    "chain_runaway",
    "chain_repeat",
    "chain_expired",
    "chain_active",
]


class FleetAlert(msgspec.Struct, kw_only=True, frozen=True, tag="fleet_alert", tag_field="type"):
    """One alert; fields a kind does not use are null."""

    alert_id: str
    kind: AlertKind
    subject: str
    tool: str | None = None
    agent_id: str | None = None
    runs: int
    agents: int | None = None
    distinct_args: int | None = None
    active_runs: int | None = None
    share: float | None = None
    error_class: str | None = None
    detector: str | None = None
    sample_run_ids: list[str]
    since_ts: int
    ts: int
    message: str
    count: int | None = None  # chain_repeat: the calls counted
    args_hash: str | None = None  # chain_repeat: the full args hash (its subject has 12 characters)


_ENCODER: Final = msgspec.json.Encoder()
_DECODER: Final[Any] = msgspec.json.Decoder(FleetAlert)


def alert_id(kind: str, subject: str, bucket: int, runs: int | None = None) -> str:
    """``{kind}:{subject}:{bucket}`` (systemic loops, which may re-alert in one bucket, add the
    count); the chain alerts (F6) give the threshold crossed instead of a bucket."""
    suffix = "" if runs is None else f":{runs}"
    return f"{kind}:{subject}:{bucket}{suffix}"


def encode_alert(alert: FleetAlert) -> bytes:
    return _ENCODER.encode(alert)


def decode_alert(data: bytes) -> FleetAlert:
    """An alert from its wire form (``msgspec.DecodeError``/``ValidationError`` if it is not one)."""
    alert: FleetAlert = _DECODER.decode(data)
    return alert


def format_since(ts_ms: int) -> str:
    """An event time as ``YYYY-MM-DD HH:MM:SS UTC`` (the outage message's ``{since}``)."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts_ms / 1000))
