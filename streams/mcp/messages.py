"""What the proxy reads of MCP's JSON-RPC messages, and the few it writes.

Every message goes through as it came, its bytes unchanged, except:

* a refused ``tools/call`` request: not forwarded; the client gets a tool result with
  ``isError: true`` and loopwatch's text for that request id (:func:`tool_error`);
* the answer to a warned call: its result gets one more text content item, the warning
  (:func:`with_note`; an error answer gets it at the end of its message).

Reading is lazy. A message from the client is parsed only when its bytes hold one of the
method names the proxy acts on (:data:`CLIENT_MARKERS`); a message from the server only while
calls wait for their answer, and then its ``id`` alone first (:func:`answer_keys`). A batch (a
JSON array, MCP 2025-03-26) is split into its members' own bytes, so a member that goes on is
forwarded byte for byte too. What does not parse goes through untouched: the peer says what
is wrong with it.

A request id is kept as the JSON text of its value (:func:`id_key`): ``1`` and ``"1"`` are two
ids, as JSON-RPC says.
"""

from __future__ import annotations

import json
from collections.abc import Container
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

from loopwatch.detectors.outcomes import MISSING

__all__ = [
    "CLIENT_MARKERS",
    "ClientBody",
    "ClientMessage",
    "ServerBody",
    "ToolCallRequest",
    "answer_keys",
    "encode",
    "id_key",
    "outcome",
    "read_client",
    "read_server",
    "tool_error",
    "with_note",
]

#: The bytes a client message must hold for the proxy to parse it.
CLIENT_MARKERS: Final = (b"tools/call", b"initialize", b"notifications/cancelled")
#: ``_meta`` key of the client's name in the 2026-07-28 per-request envelope
CLIENT_INFO_META: Final = "io.modelcontextprotocol/clientInfo"


def _loads(raw: bytes | msgspec.Raw) -> Any:
    """JSON as peers send it: msgspec, or the standard library for what msgspec refuses (a lone
    UTF-16 surrogate, which JavaScript writes). ``ValueError`` when it is no JSON."""
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError:
        try:
            return json.loads(bytes(raw))
        except RecursionError as exc:
            raise ValueError("nested too deeply") from exc


def encode(value: Any) -> bytes:
    """``value`` as compact JSON on one line (no raw line break: stdio frames by lines)."""
    try:
        return msgspec.json.encode(value)
    except (TypeError, ValueError, OverflowError):  # a lone surrogate, an int beyond 64 bits
        return json.dumps(value, separators=(",", ":")).encode()


def id_key(request_id: Any) -> bytes:
    """A request id as a table key: its JSON text."""
    return encode(request_id)


@dataclass(frozen=True, slots=True)
class ToolCallRequest:
    """A ``tools/call`` request: its id, the tool's name and ``arguments``."""

    id: Any
    key: bytes
    name: str
    arguments: Any
    #: the client's name in the request's ``_meta`` (2026-07-28 envelope), if it says one
    client_name: str | None = None
    #: a task-augmented call (``params.task``): its answer creates a task, not the result
    task: bool = False


@dataclass(frozen=True, slots=True)
class ClientMessage:
    """One message from the client (a whole body, or a member of its batch)."""

    raw: bytes
    call: ToolCallRequest | None = None
    #: ``initialize``'s ``clientInfo.name``
    client_name: str | None = None
    #: the key of the request a ``notifications/cancelled`` cancels
    cancelled: bytes | None = None


@dataclass(frozen=True, slots=True)
class ClientBody:
    """A client's message or batch, split (``batch``: a JSON array)."""

    messages: list[ClientMessage]
    batch: bool = False


def _name(info: Any) -> str | None:
    name = info.get("name") if isinstance(info, dict) else None
    return name if isinstance(name, str) and name else None


def _client_message(raw: bytes) -> ClientMessage:
    if not any(marker in raw for marker in CLIENT_MARKERS):
        return ClientMessage(raw)
    try:
        value = _loads(raw)
    except ValueError:
        return ClientMessage(raw)
    if not isinstance(value, dict):
        return ClientMessage(raw)
    method = value.get("method")
    params = value.get("params")
    params = params if isinstance(params, dict) else {}
    if method == "tools/call" and "id" in value:
        name = params.get("name")
        if not isinstance(name, str):
            return ClientMessage(raw)  # the server answers that it is invalid
        meta = params.get("_meta")
        client = _name(meta.get(CLIENT_INFO_META)) if isinstance(meta, dict) else None
        arguments = params.get("arguments", {})
        request_id = value["id"]
        call = ToolCallRequest(request_id, id_key(request_id), name, arguments, client, "task" in params)
        return ClientMessage(raw, call=call)
    if method == "initialize":
        return ClientMessage(raw, client_name=_name(params.get("clientInfo")))
    if method == "notifications/cancelled" and "requestId" in params:
        return ClientMessage(raw, cancelled=id_key(params["requestId"]))
    return ClientMessage(raw)


def _members(raw: bytes) -> list[bytes] | None:
    """The members of a batch, each its own bytes (None: not a JSON array)."""
    try:
        members = msgspec.json.decode(raw, type=list[msgspec.Raw])
    except msgspec.DecodeError:
        return None
    return [bytes(member) for member in members]


def read_client(raw: bytes) -> ClientBody | None:
    """The client's message (or batch) in ``raw``; None when the proxy has nothing to do with
    it (forward it as it is)."""
    if not any(marker in raw for marker in CLIENT_MARKERS):
        return None
    body = raw.strip()
    if body.startswith(b"["):
        members = _members(body)
        if members is None:
            return None
        messages = [_client_message(member) for member in members]
        batch = True
    else:
        messages = [_client_message(body)]
        batch = False
    if all(m.call is None and m.client_name is None and m.cancelled is None for m in messages):
        return None
    return ClientBody(messages, batch)


class _Envelope(msgspec.Struct):
    """A message's ``id`` and ``method`` (the rest is skipped, not built)."""

    id: Any = msgspec.UNSET
    method: Any = msgspec.UNSET


def answer_keys(raw: bytes) -> list[bytes]:
    """The keys of the answers (responses: an id, no method) in a server's message or batch."""
    try:
        found = msgspec.json.decode(raw, type=_Envelope | list[_Envelope])
    except (msgspec.DecodeError, msgspec.ValidationError):
        return []
    envelopes = found if isinstance(found, list) else [found]
    return [
        id_key(envelope.id)
        for envelope in envelopes
        if envelope.method is msgspec.UNSET and envelope.id is not msgspec.UNSET and envelope.id is not None
    ]


@dataclass
class ServerBody:
    """A server's message or batch holding answers the proxy waits for: ``answers`` (key to
    the answer's index and value), the members' own bytes, and the ones it changed."""

    members: list[bytes]
    batch: bool
    answers: dict[bytes, tuple[int, dict[str, Any]]]
    changed: dict[int, bytes] = field(default_factory=dict)

    def replace(self, key: bytes, answer: dict[str, Any]) -> None:
        index, _ = self.answers[key]
        self.changed[index] = encode(answer)

    def encoded(self) -> bytes | None:
        """The body as it goes on (None: unchanged)."""
        if not self.changed:
            return None
        parts = [self.changed.get(index, member) for index, member in enumerate(self.members)]
        return b"[" + b",".join(parts) + b"]" if self.batch else parts[0]


def read_server(raw: bytes, waiting: Container[bytes]) -> ServerBody | None:
    """The answers in ``raw`` to requests in ``waiting``; None when it holds none."""
    keys = answer_keys(raw)
    if not any(key in waiting for key in keys):
        return None
    body = raw.strip()
    batch = body.startswith(b"[")
    members = _members(body) if batch else [body]
    if members is None:
        return None
    answers: dict[bytes, tuple[int, dict[str, Any]]] = {}
    for index, member in enumerate(members):
        try:
            value = _loads(member)
        except ValueError:
            continue
        if isinstance(value, dict) and "method" not in value and value.get("id") is not None:
            key = id_key(value["id"])
            if key in waiting:
                answers[key] = (index, value)
    return ServerBody(members, batch, answers) if answers else None


def tool_error(request_id: Any, text: str) -> bytes:
    """The answer to a ``tools/call`` that was not run: a tool result with ``isError``."""
    result = {"content": [{"type": "text", "text": text}], "isError": True}
    return encode({"jsonrpc": "2.0", "id": request_id, "result": result})


def with_note(answer: dict[str, Any], note: str) -> dict[str, Any] | None:
    """``answer`` with ``note`` appended to what the model reads (None: nothing to append to):
    a tool result gets one more text content item, an error answer the note after its message."""
    result = answer.get("result")
    if isinstance(result, dict) and isinstance(result.get("content"), list):
        content = [*result["content"], {"type": "text", "text": note}]
        return {**answer, "result": {**result, "content": content}}
    error = answer.get("error")
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return {**answer, "error": {**error, "message": f"{error['message']}\n\n{note}"}}
    return None


def _texts(content: Any) -> str:
    if not isinstance(content, list):
        return ""
    texts = [item["text"] for item in content if isinstance(item, dict) and isinstance(item.get("text"), str)]
    return "\n".join(texts)


def outcome(answer: dict[str, Any]) -> tuple[Any, str | None] | None:
    """What the call gave, as loopwatch records it: ``(result, None)``, or ``(MISSING,
    error)`` for an error answer or a tool result with ``isError`` (its text); None for the
    answer to a task-augmented call (a task was created: no outcome yet).

    The result is the tool result's ``content`` (what the model reads), or the whole result
    where it has none."""
    if "error" in answer:
        error = answer["error"]
        message = error.get("message") if isinstance(error, dict) else error
        return MISSING, str(message) if message else "tool call failed"
    result = answer.get("result")
    if not isinstance(result, dict):
        return result, None
    if "content" not in result and isinstance(result.get("task"), dict):
        return None
    if result.get("isError") is True:
        return MISSING, _texts(result.get("content")) or "tool call failed"
    return result.get("content", result), None
