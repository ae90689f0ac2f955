"""Malformed input records of every class the doors must refuse (and survive).

Each maker gives the wire bytes of one record for a given run id and index; none of them
is a valid event. Used by the worker's and the gateway's unit tests, the fuzzing suite and
the chaos scenario with poison pills.
"""

from __future__ import annotations

import json
from collections.abc import Callable

__all__ = ["POISON", "poison_record"]


def _call(run: str, index: int, **fields: object) -> bytes:
    event: dict[str, object] = {
        "type": "tool_call",
        "event_id": f"poison-{index}",
        "run_id": run,
        "tool": "read",
        "params": {"path": "a"},
    }
    event.update(fields)
    return json.dumps(event).encode()  # ASCII: lone surrogates are written as \ud800


def _deep(depth: int) -> object:
    value: object = []
    for _ in range(depth - 1):
        value = [value]
    return value


def _deep_raw(run: str, index: int, depth: int) -> bytes:
    head = _call(run, index, params=None).replace(b'"params": null', b'"params": ' + b"[" * depth)
    return head[:-1] + b"]" * depth + b"}"


POISON: dict[str, Callable[[str, int], bytes]] = {
    "surrogate run_id": lambda run, i: _call(run + "\ud800", i),
    "surrogate session_id": lambda run, i: _call(run, i, run_id=None, session_id="s\udc00"),
    "surrogate event_id": lambda run, i: _call(run, i, event_id=f"e{i}\ud83d"),
    "surrogate tool": lambda run, i: _call(run, i, tool="re\ud800ad"),
    "surrogate agent_id": lambda run, i: _call(run, i, agent_id="\udfff"),
    "surrogate tool_call_id": lambda run, i: _call(run, i, tool_call_id="c\ud800"),
    "surrogate batch_id": lambda run, i: _call(run, i, batch_id="turn\udc00"),
    "surrogate type": lambda run, i: _call(run, i, type="tool_\ud800call"),
    "surrogate outcome_kind": lambda run, i: _call(
        run, i, type="tool_result", result_digest="d", outcome_kind="veto\udc00"
    ),
    "surrogate usage key": lambda run, i: _call(run, i, usage={"input_tokens\ud800": 1}),
    "batch_id 600 bytes": lambda run, i: _call(run, i, batch_id="b" * 600),
    "batch_id a number": lambda run, i: _call(run, i, batch_id=7),
    "params 100 deep": lambda run, i: _call(run, i, params=_deep(100)),
    "params 3000 deep": lambda run, i: _deep_raw(run, i, 3000),
    "ts 2**70": lambda run, i: _call(run, i, ts=2**70),
    "ts 2**64": lambda run, i: _call(run, i, ts=2**64),
    "usage 2**70 tokens": lambda run, i: _call(run, i, usage={"input_tokens": 2**70}),
    # a number beyond a double where a number must fit (docs/wire-numbers.md), and NaN (not JSON)
    "ts beyond a double": lambda run, i: _call(run, i, ts=0).replace(b'"ts": 0', b'"ts": -1e309'),
    "cost beyond a double": lambda run, i: _call(run, i, usage={"cost_usd": 0}).replace(
        b'"cost_usd": 0', b'"cost_usd": 1e400'
    ),
    "NaN in params": lambda run, i: _call(run, i, params={"n": 0}).replace(b'"n": 0', b'"n": NaN'),
    "run_id 600 bytes": lambda run, i: _call("r" * 600, i),
    "empty tool": lambda run, i: _call(run, i, tool=""),
    "invalid UTF-8": lambda run, i: b'{"type":"tool_call","event_id":"\xff\xfe","run_id":"r"}',
    "not JSON": lambda run, i: b"{not json",
}


def poison_record(kind: str, run_id: str, index: int) -> bytes:
    return POISON[kind](run_id, index)
