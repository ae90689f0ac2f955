"""The Anthropic Messages API, as Claude Code uses it: ``POST /v1/messages`` (server-sent events
when ``"stream": true``, one JSON message otherwise) and ``POST /v1/messages/count_tokens``."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator, Mapping
from typing import Any

from aiohttp import web

from tests.integration.fake_model.script import Conversation, Reply
from tests.integration.fake_model.wire import ToolHistory, WireApi, estimated_tokens, json_objects

__all__ = ["AnthropicApi", "parse_request", "render_message", "stream_events"]

API = "anthropic"


def _blocks(content: Any) -> list[Mapping[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return json_objects(content)


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
    messages = json_objects(body.get("messages"))
    history = ToolHistory(prompt=_prompt(messages))
    for message in messages:
        role = message.get("role")
        if role == "assistant":
            history.turn += 1
        mine = []
        for block in _blocks(message.get("content")):
            if block.get("type") == "tool_use":
                history.call(str(block.get("id")), str(block.get("name")), block.get("input"))
            elif block.get("type") == "tool_result":
                content = block.get("content")
                text = content if isinstance(content, str) else _text_of(content)
                mine.append(history.result(str(block.get("tool_use_id")), text, bool(block.get("is_error"))))
        if role == "user":
            history.last = mine
    tool_names = [str(tool.get("name")) for tool in json_objects(body.get("tools"))]
    return history.conversation(API, system=body.get("system"), tool_names=tool_names, messages=messages)


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


class AnthropicApi(WireApi):
    """The routes; every request is recorded, the script answers ``/v1/messages``."""

    name = API

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/messages", self.messages)
        app.router.add_post("/v1/messages/count_tokens", self.count_tokens)

    def error(self, status: int, message: str) -> web.Response:
        kind = "not_found_error" if status == 404 else "invalid_request_error"
        return web.json_response(
            {"type": "error", "error": {"type": kind, "message": message}}, status=status
        )

    async def messages(self, request: web.Request) -> web.StreamResponse:
        body = await self.json_body(request)
        if not isinstance(body, Mapping) or not isinstance(body.get("messages"), list):
            self.record(request, body, status=400)
            return self.error(400, "messages: a list is required")
        conversation = parse_request(body)
        reply = self.script.reply(conversation)
        message = render_message(reply, str(body.get("model", "fake-model")))
        events = stream_events(message) if body.get("stream") else None
        return await self.respond(request, body, conversation, reply, message, events)

    async def count_tokens(self, request: web.Request) -> web.Response:
        body = await self.json_body(request)
        self.record(request, body)
        return web.json_response({"input_tokens": estimated_tokens(body)})
