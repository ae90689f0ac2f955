"""The Anthropic Messages API, as Claude Code uses it: ``POST /v1/messages`` (server-sent events
when ``"stream": true``, one JSON message otherwise) and ``POST /v1/messages/count_tokens``."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator, Mapping
from typing import Any

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

__all__ = ["AnthropicApi", "parse_request", "render_message", "stream_events"]

API = "anthropic"


def _blocks(content: Any) -> list[Mapping[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [block for block in content if isinstance(block, Mapping)]
    return []


def _text_of(content: Any) -> str:
    return "\n".join(str(block.get("text", "")) for block in _blocks(content) if block.get("type") == "text")


def _prompt(messages: list[Mapping[str, Any]]) -> str:
    """The first user message's last text that is not a ``<system-reminder>``."""
    for message in messages:
        if message.get("role") != "user":
            continue
        texts = [
            str(block.get("text", ""))
            for block in _blocks(message.get("content"))
            if block.get("type") == "text"
            and not str(block.get("text", "")).lstrip().startswith("<system-reminder>")
        ]
        return texts[-1] if texts else ""
    return ""


def parse_request(body: Mapping[str, Any]) -> Conversation:
    raw = body.get("messages")
    messages = [m for m in raw if isinstance(m, Mapping)] if isinstance(raw, list) else []
    calls: dict[str, tuple[str | None, Any]] = {}
    outcomes: list[ToolOutcome] = []
    last: list[ToolOutcome] = []
    turn = 0
    for message in messages:
        role = message.get("role")
        if role == "assistant":
            turn += 1
        mine: list[ToolOutcome] = []
        for block in _blocks(message.get("content")):
            if block.get("type") == "tool_use":
                calls[str(block.get("id"))] = (str(block.get("name")), block.get("input"))
            elif block.get("type") == "tool_result":
                call_id = str(block.get("tool_use_id"))
                name, call_input = calls.get(call_id, (None, None))
                content = block.get("content")
                text = content if isinstance(content, str) else _text_of(content)
                mine.append(ToolOutcome(call_id, name, call_input, text, bool(block.get("is_error"))))
        outcomes += mine
        if role == "user":
            last = mine
    tools = body.get("tools")
    tool_names = tuple(
        str(tool.get("name"))
        for tool in (tools if isinstance(tools, list) else [])
        if isinstance(tool, Mapping)
    )
    return Conversation(
        api=API,
        prompt=_prompt(messages),
        system="\n".join(all_strings(body.get("system"))),
        tool_names=tool_names,
        turn=turn,
        outcomes=tuple(outcomes),
        last_outcomes=tuple(last),
        texts=tuple(all_strings(messages)),
    )


_ids = itertools.count(1)


def render_message(reply: Reply, model: str) -> dict[str, Any]:
    """The reply as a Messages API ``message`` (what a non-streaming request gets)."""
    content: list[dict[str, Any]] = []
    if reply.text:
        content.append({"type": "text", "text": reply.text})
    for call in reply.calls:
        content.append(
            {
                "type": "tool_use",
                "id": f"toolu_fake{next(_ids):06d}",
                "name": call.name,
                "input": dict(call.input),
            }
        )
    return {
        "id": f"msg_fake{next(_ids):06d}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": "end_turn" if reply.final else "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 10},
    }


def stream_events(message: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """The server-sent events that stream ``message``."""
    start = {**message, "content": [], "stop_reason": None, "usage": {"input_tokens": 10, "output_tokens": 1}}
    yield "message_start", {"type": "message_start", "message": start}
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            yield (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "text", "text": ""},
                },
            )
            delta: dict[str, Any] = {"type": "text_delta", "text": block["text"]}
        else:
            yield (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {**block, "input": {}},
                },
            )
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
    yield (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": 10},
        },
    )
    yield "message_stop", {"type": "message_stop"}


def _error(status: int, message: str) -> web.Response:
    body = {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    return web.json_response(body, status=status)


class AnthropicApi:
    """The routes; every request is recorded, the script answers ``/v1/messages``."""

    def __init__(self, script: Script, recorder: Recorder) -> None:
        self.script = script
        self.recorder = recorder

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/messages", self.messages)
        app.router.add_post("/v1/messages/count_tokens", self.count_tokens)

    async def _body(self, request: web.Request) -> Any:
        try:
            return await request.json()
        except ValueError:
            return None

    def _record(
        self,
        request: web.Request,
        body: Any,
        conversation: Conversation | None,
        reply: Reply | None,
        status: int,
        response: Any = None,
    ) -> None:
        headers = dict(request.headers)
        exchange = Exchange(
            API, request.method, request.path, body, conversation, reply, status, headers, response
        )
        self.recorder.add(exchange)

    async def messages(self, request: web.Request) -> web.StreamResponse:
        body = await self._body(request)
        if not isinstance(body, Mapping) or not isinstance(body.get("messages"), list):
            self._record(request, body, None, None, 400)
            return _error(400, "messages: a list is required")
        conversation = parse_request(body)
        reply = self.script.reply(conversation)
        message = render_message(reply, str(body.get("model", "fake-model")))
        self._record(request, body, conversation, reply, 200, message)
        if not body.get("stream"):
            return web.json_response(message)
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        for event, data in stream_events(message):
            await response.write(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())
        await response.write_eof()
        return response

    async def count_tokens(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        self._record(request, body, None, None, 200)
        return web.json_response({"input_tokens": max(1, len(json.dumps(body)) // 4)})
