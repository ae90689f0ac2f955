"""The OpenAI Responses API, as Codex uses it: ``POST {base_url}/responses`` (server-sent events
when ``"stream": true``, one JSON response otherwise) and ``GET {base_url}/models``.

Codex (``@openai/codex`` 0.171) speaks only the Responses wire API to a custom provider
(``wire_api = "chat"`` is refused at start-up). A request is ``{"model", "instructions",
"input": [items], "tools": [...], "stream": true, ...}``; the events Codex acts on are
``response.created``, ``response.output_item.done`` (one per output item: a ``function_call``
or an assistant ``message``) and ``response.completed``. A tool result comes back in the next
request's ``input`` as ``{"type": "function_call_output", "call_id", "output"}``.

``FakeModel(script, ResponsesApi)`` serves this API instead of Anthropic's, under ``/v1`` (so
the provider's ``base_url`` is ``model.url + "/v1"``).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from tests.integration.fake_model.script import Conversation, Recorder, Reply, Script
from tests.integration.fake_model.wire import ToolHistory, WireApi, json_objects

__all__ = ["ResponsesApi", "parse_request", "render_response", "stream_events"]

API = "openai-responses"
CALL_TYPES = ("function_call", "custom_tool_call", "local_shell_call")
OUTPUT_TYPES = ("function_call_output", "custom_tool_call_output", "local_shell_call_output")


def output_text(output: Any) -> str:
    """A tool output as text: a string, or content items with ``text`` (joined by newlines)."""
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return "\n".join(output_text(part) for part in output)
    if isinstance(output, Mapping):
        for key in ("text", "content", "output"):
            if key in output:
                return output_text(output[key])
    return json.dumps(output)


def _call_input(item: Mapping[str, Any]) -> Any:
    if item.get("type") == "function_call":
        try:
            return json.loads(str(item.get("arguments") or "{}"))
        except ValueError:
            return item.get("arguments")
    if item.get("type") == "custom_tool_call":
        return item.get("input")
    return item.get("action")


def _message_text(item: Mapping[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    return "\n".join(str(part.get("text", "")) for part in json_objects(content))


def parse_request(body: Mapping[str, Any]) -> Conversation:
    raw = body.get("input")
    items = json_objects(raw)
    if isinstance(raw, str):
        items = [{"type": "message", "role": "user", "content": raw}]
    history = ToolHistory()
    answered = False  # an assistant item came after the last tool result
    for item in items:
        kind = item.get("type", "message")
        if kind in CALL_TYPES or (kind == "message" and item.get("role") == "assistant"):
            history.turn += 1
            answered = True
            if kind in CALL_TYPES:
                history.call(str(item.get("call_id")), str(item.get("name") or kind), _call_input(item))
        elif kind in OUTPUT_TYPES:
            if answered:
                history.last, answered = [], False
            outcome = history.result(str(item.get("call_id")), output_text(item.get("output")), False)
            history.last.append(outcome)
        elif kind == "message" and item.get("role") == "user":
            text = _message_text(item)
            if not history.prompt and not text.lstrip().startswith("<"):  # not <environment_context> etc.
                history.prompt = text
            history.last, answered = [], False
    tool_names = [str(tool.get("name") or tool.get("type")) for tool in json_objects(body.get("tools"))]
    return history.conversation(API, system=body.get("instructions"), tool_names=tool_names, messages=items)


_ids = itertools.count(1)
#: every response's ``created_at`` (Unix seconds; the AI SDK's stream parser requires one)
CREATED_AT = 1_780_000_000


def render_response(reply: Reply, model: str) -> dict[str, Any]:
    """The reply as a Responses API ``response`` object (what a non-streaming request gets)."""
    output: list[dict[str, Any]] = []
    if reply.text:
        output.append(
            {
                "type": "message",
                "id": f"msg_fake{next(_ids):06d}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": reply.text, "annotations": []}],
            }
        )
    for call in reply.calls:
        number = next(_ids)
        output.append(
            {
                "type": "function_call",
                "id": f"fc_fake{number:06d}",
                "call_id": f"call_fake{number:06d}",
                "name": call.name,
                "arguments": json.dumps(dict(call.input)),
                "status": "completed",
            }
        )
    return {
        "id": f"resp_fake{next(_ids):06d}",
        "object": "response",
        "created_at": CREATED_AT,
        "status": "completed",
        "model": model,
        "output": output,
        "usage": {
            "input_tokens": 10,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 10,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 20,
        },
    }


def stream_events(response: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The server-sent events that stream ``response``."""
    started = {**response, "status": "in_progress", "output": []}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": started},
        {"type": "response.in_progress", "response": started},
    ]
    for index, item in enumerate(response["output"]):
        events.append({"type": "response.output_item.added", "output_index": index, "item": item})
        if item["type"] == "message":
            text = item["content"][0]["text"]
            events.append(
                {
                    "type": "response.output_text.delta",
                    "item_id": item["id"],
                    "output_index": index,
                    "content_index": 0,
                    "delta": text,
                }
            )
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    events.append({"type": "response.completed", "response": dict(response)})
    for number, event in enumerate(events):
        event["sequence_number"] = number
    return events


class ResponsesApi(WireApi):
    """The routes under ``prefix``; every request is recorded, the script answers ``/responses``."""

    name = API

    def __init__(self, script: Script, recorder: Recorder, prefix: str = "/v1") -> None:
        super().__init__(script, recorder)
        self.prefix = prefix

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post(f"{self.prefix}/responses", self.responses)
        app.router.add_get(f"{self.prefix}/models", self.models)

    def error(self, status: int, message: str) -> web.Response:
        return web.json_response(
            {"error": {"message": message, "type": "invalid_request_error"}}, status=status
        )

    async def responses(self, request: web.Request) -> web.StreamResponse:
        body = await self.json_body(request)
        if not isinstance(body, Mapping) or not isinstance(body.get("input"), list | str):
            self.record(request, body, status=400)
            return self.error(400, "input: a list is required")
        conversation = parse_request(body)
        reply = self.script.reply(conversation)
        response = render_response(reply, str(body.get("model", "fake-model")))
        events = [(event["type"], event) for event in stream_events(response)] if body.get("stream") else None
        return await self.respond(request, body, conversation, reply, response, events)

    async def models(self, request: web.Request) -> web.Response:
        self.record(request, None)
        return web.json_response({"object": "list", "data": [{"id": "fake-model", "object": "model"}]})
