"""What the wire API modules (``anthropic.py``, ``openai_responses.py``, ``gemini.py``) share:
:class:`WireApi`, the base of an API's routes (the script answers, every request is recorded,
answers go as JSON or server-sent events), and :class:`ToolHistory`, which reads a request's tool
calls and results, message by message, into a :class:`Conversation`."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from aiohttp import web

from tests.integration.fake_model.script import (
    Conversation,
    Exchange,
    Recorder,
    Reply,
    Script,
    ToolOutcome,
    all_strings,
)

__all__ = ["ApiFactory", "ToolHistory", "WireApi", "estimated_tokens", "json_objects"]


class WireApi(ABC):
    """The routes of one wire API: ``script`` answers the model's turns, ``recorder`` keeps every
    request (as an :class:`Exchange` of API ``name``)."""

    name: ClassVar[str]

    def __init__(self, script: Script, recorder: Recorder) -> None:
        self.script = script
        self.recorder = recorder

    @abstractmethod
    def add_routes(self, app: web.Application) -> None: ...

    @abstractmethod
    def error(self, status: int, message: str) -> web.Response:
        """An error response in this API's shape."""

    @staticmethod
    async def json_body(request: web.Request) -> Any:
        """The request's JSON body, or None when it is not JSON."""
        try:
            return await request.json()
        except ValueError:
            return None

    def record(
        self,
        request: web.Request,
        body: Any,
        conversation: Conversation | None = None,
        reply: Reply | None = None,
        status: int = 200,
        response: Any = None,
    ) -> None:
        headers = dict(request.headers)
        exchange = Exchange(
            self.name, request.method, request.path, body, conversation, reply, status, headers, response
        )
        self.recorder.add(exchange)

    async def respond(
        self,
        request: web.Request,
        body: Any,
        conversation: Conversation | None,
        reply: Reply,
        response: Mapping[str, Any],
        events: Iterable[tuple[str | None, Any]] | None = None,
        newline: str = "\n",
    ) -> web.StreamResponse:
        """Record the exchange, then answer ``response`` as one JSON body; or, given ``events``
        (name, JSON data), as server-sent events: an ``event:`` line when named, the ``data:``
        line, then a blank line, each line ended by ``newline``."""
        self.record(request, body, conversation, reply, response=response)
        if events is None:
            return web.json_response(response)
        stream = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await stream.prepare(request)
        for event, data in events:
            named = f"event: {event}{newline}" if event is not None else ""
            await stream.write(f"{named}data: {json.dumps(data)}{newline}{newline}".encode())
        await stream.write_eof()
        return stream


ApiFactory = Callable[[Script, Recorder], WireApi]
"""What ``FakeModel`` serves: a :class:`WireApi` class (or a partial of one with its options)."""


def json_objects(value: Any) -> list[Mapping[str, Any]]:
    """The objects in a JSON list (none when ``value`` is not a list)."""
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []


def estimated_tokens(body: Any) -> int:
    """A token count for ``count_tokens``-like requests: about four characters of JSON a token."""
    return max(1, len(json.dumps(body)) // 4)


@dataclass
class ToolHistory:
    """A request's tool calls and results, oldest first, as an API module reads its messages."""

    calls: dict[str, tuple[str | None, Any]] = field(default_factory=dict)  # call id: (name, input)
    outcomes: list[ToolOutcome] = field(default_factory=list)
    last: list[ToolOutcome] = field(default_factory=list)  # the results the last message sent
    turn: int = 0  # the model's answers so far
    prompt: str = ""

    def call(self, call_id: str, name: str | None, call_input: Any) -> None:
        self.calls[call_id] = (name, call_input)

    def result(self, call_id: str, text: str, is_error: bool, name: str | None = None) -> ToolOutcome:
        """The result of ``call_id``, with its call's name and input when the request holds the call
        (else ``name``), added to ``outcomes``."""
        call_name, call_input = self.calls.get(call_id, (name, None))
        outcome = ToolOutcome(call_id, call_name, call_input, text, is_error)
        self.outcomes.append(outcome)
        return outcome

    def conversation(
        self, api: str, *, system: Any, tool_names: Iterable[str], messages: Any
    ) -> Conversation:
        """The request as the script sees it: ``system`` and ``messages`` are JSON values whose
        strings are the system prompt and the conversation's texts."""
        return Conversation(
            api=api,
            prompt=self.prompt,
            system="\n".join(all_strings(system)),
            tool_names=tuple(tool_names),
            turn=self.turn,
            outcomes=tuple(self.outcomes),
            last_outcomes=tuple(self.last),
            texts=tuple(all_strings(messages)),
        )
