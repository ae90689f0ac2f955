"""One MCP session as one loopwatch run, whatever the transport.

The transport hands :class:`McpSession` each message (or batch) of the client before it
forwards it (:meth:`McpSession.from_client`) and each of the server before it relays it
(:meth:`McpSession.from_server`):

* a ``tools/call`` request is decided first. One that may go on is forwarded as it came and
  waits for its answer; a refused one (``block``, ``abort``, and once the run is aborted every
  later call) is not forwarded: the client gets a tool error with loopwatch's text for its id;
* the answer to a waiting call is reported as the call's outcome (:func:`messages.outcome`);
  a warning decided before the call is appended to what the model reads; a cancelled call
  (``notifications/cancelled``) waits no more and reports nothing;
* everything else goes through untouched.

The run's agent is ``--agent-id`` when given, else the client's name (``initialize``'s
``clientInfo.name``, or the 2026-07-28 envelope's ``_meta`` on the call), else ``mcp``. The
tool recorded is the MCP tool's name, its params the call's ``arguments``, its call id the
JSON-RPC id.
"""

from __future__ import annotations

import hashlib
import sys
import time
import traceback
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Final, TextIO

from loopwatch.detectors.input_limits import identity_problem
from loopwatch.streams.mcp.deciders import Decider, McpCall, Ruling
from loopwatch.streams.mcp.messages import (
    ToolCallRequest,
    encode,
    outcome,
    read_client,
    read_server,
    tool_error,
    with_note,
)

__all__ = ["DEFAULT_AGENT", "WAITING_KEPT", "ClientStep", "McpSession", "call_id_of"]

#: the agent of a session whose client says no name
DEFAULT_AGENT: Final = "mcp"
#: calls kept waiting for their answer at most (the oldest forgotten first: a client that
#: went away never reads them)
WAITING_KEPT: Final = 10_000


@dataclass(frozen=True, slots=True)
class ClientStep:
    """What to do with a client's message: forward ``forward`` (None: nothing), and answer
    the client ``replies`` (one message each) at once."""

    forward: bytes | None
    replies: list[bytes] = field(default_factory=list)


def call_id_of(request_id: Any) -> str:
    """A JSON-RPC id as a call id: a string id as it is, another its JSON text; one too long
    for an id (over 512 bytes) or not valid Unicode, its digest."""
    text = request_id if isinstance(request_id, str) else encode(request_id).decode("utf-8", "replace")
    if identity_problem(text) is None:
        return text
    return "mcp-id-" + hashlib.blake2b(encode(request_id), digest_size=16).hexdigest()


@dataclass(frozen=True, slots=True)
class _Waiting:
    call: McpCall
    ruling: Ruling


class McpSession:
    """One MCP session's calls (see the module's docstring)."""

    def __init__(
        self,
        decider: Decider,
        run_id: str,
        session_id: str | None = None,
        agent_id: str | None = None,
        err: TextIO | None = None,
    ) -> None:
        self.decider = decider
        self.err = err
        self.run_id = run_id
        self.session_id = session_id
        self.fixed_agent = agent_id
        self.client_name: str | None = None
        self.waiting: OrderedDict[bytes, _Waiting] = OrderedDict()
        self.ended = False
        #: the calls decided so far
        self.calls = 0
        self.last_active = time.monotonic()

    @property
    def agent_id(self) -> str:
        return self.fixed_agent or self.client_name or DEFAULT_AGENT

    def _name_client(self, name: str | None) -> None:
        if name is not None and identity_problem(name) is None:
            self.client_name = name

    def _fault(self, exc: Exception, raw: bytes) -> None:
        """A fault of loopwatch's own: said on stderr; the message goes on unchecked."""
        where = "".join(traceback.format_exception_only(exc)).strip()
        print(
            f"loopwatch mcp: internal error on a {len(raw)}-byte message ({where}); it goes on unchecked",
            file=self.err if self.err is not None else sys.stderr,
            flush=True,
        )

    async def from_client(self, raw: bytes) -> ClientStep:
        """What to do with ``raw``, a message (or batch) from the client (a fault of loopwatch's
        own lets it go on as it came: the session is never broken on loopwatch's account)."""
        self.last_active = time.monotonic()
        try:
            return await self._from_client(raw)
        except Exception as exc:  # noqa: BLE001 - any fault: the message goes on
            self._fault(exc, raw)
            return ClientStep(raw)

    async def _from_client(self, raw: bytes) -> ClientStep:
        body = read_client(raw)
        if body is None:
            return ClientStep(raw)
        kept: list[bytes] = []
        replies: list[bytes] = []
        for message in body.messages:
            self._name_client(message.client_name)
            if message.cancelled is not None:
                self.waiting.pop(message.cancelled, None)
            if message.call is None:
                kept.append(message.raw)
                continue
            self._name_client(message.call.client_name)
            ruling = await self._decide(message.call)
            if ruling.proceed:
                kept.append(message.raw)
            else:
                replies.append(tool_error(message.call.id, ruling.text or "loopwatch refused this call."))
        if not replies:
            return ClientStep(raw)
        if not body.batch:
            return ClientStep(None, replies)
        return ClientStep(b"[" + b",".join(kept) + b"]" if kept else None, replies)

    async def _decide(self, request: ToolCallRequest) -> Ruling:
        call = McpCall(
            self.run_id,
            self.agent_id,
            self.session_id,
            request.name,
            request.arguments,
            call_id_of(request.id),
        )
        ruling = await self.decider.before(call)
        self.calls += 1
        if ruling.proceed:
            self.waiting.pop(request.key, None)
            self.waiting[request.key] = _Waiting(call, ruling)
            while len(self.waiting) > WAITING_KEPT:
                self.waiting.popitem(last=False)
        return ruling

    async def from_server(self, raw: bytes) -> bytes | None:
        """``raw``, a message (or batch) from the server, as it goes on to the client (None:
        unchanged; so too after a fault of loopwatch's own)."""
        self.last_active = time.monotonic()
        if not self.waiting:
            return None
        try:
            return await self._from_server(raw)
        except Exception as exc:  # noqa: BLE001 - any fault: the message goes on
            self._fault(exc, raw)
            return None

    async def _from_server(self, raw: bytes) -> bytes | None:
        if not self.waiting:
            return None
        body = read_server(raw, self.waiting)
        if body is None:
            return None
        for key, (_, answer) in body.answers.items():
            waiting = self.waiting.pop(key)
            note = waiting.ruling.text if waiting.ruling.action == "warn" else None
            got = outcome(answer)
            if got is not None:
                after = await self.decider.after(waiting.call, *got)
                if after.action == "abort" and after.text:
                    note = after.text if note is None else f"{note}\n\n{after.text}"
            noted = with_note(answer, note) if note else None
            if noted is not None:
                body.replace(key, noted)
        return body.encoded()

    async def end(self) -> None:
        """The session is over: its run ends (once)."""
        if self.ended:
            return
        self.ended = True
        self.waiting.clear()
        await self.decider.end(self.run_id, self.agent_id, self.session_id)
