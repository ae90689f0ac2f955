"""The OpenAI Chat Completions API, as OpenAI-compatible clients use it: ``POST
{base_url}/chat/completions`` (server-sent ``chat.completion.chunk`` events ended by ``data:
[DONE]`` when ``"stream": true``, one ``chat.completion`` otherwise) and ``GET {base_url}/models``.

A request is ``{"model", "messages": [...], "tools": [{"type": "function", "function": {"name",
"parameters"}}], "stream", ...}``. The model asks for tools in its message's ``tool_calls``
(``{"id", "type": "function", "function": {"name", "arguments": "<JSON text>"}}``); a result
comes back in the next request as a ``{"role": "tool", "tool_call_id", "content"}`` message.
The conversation's prompt is the first user message's text.

``FakeModel(script, ChatCompletionsApi)`` serves this API under ``/v1`` (the client's
``base_url`` is ``model.url + "/v1"``); it can be served next to ``ResponsesApi``.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from tests.integration.fake_model.script import Conversation, Recorder, Reply, Script
from tests.integration.fake_model.wire import ToolHistory, WireApi, json_objects

__all__ = ["ChatCompletionsApi", "parse_request", "render_completion", "stream_chunks"]

API = "openai-chat"


def content_text(content: Any) -> str:
    """A message's content as text: a string, or content parts with ``text`` (joined by newlines)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in json_objects(content) if "text" in part)
    return "" if content is None else json.dumps(content)


def _arguments(function: Mapping[str, Any]) -> Any:
    arguments = function.get("arguments")
    if not isinstance(arguments, str):
        return arguments
    try:
        return json.loads(arguments or "{}")
    except ValueError:
        return arguments


def parse_request(body: Mapping[str, Any]) -> Conversation:
    messages = json_objects(body.get("messages"))
    history = ToolHistory()
    answered = False  # an assistant message came after the last tool result
    for message in messages:
        role = message.get("role")
        if role == "assistant":
            history.turn += 1
            answered = True
            for call in json_objects(message.get("tool_calls")):
                function = call.get("function")
                function = function if isinstance(function, Mapping) else {}
                history.call(str(call.get("id")), str(function.get("name")), _arguments(function))
        elif role == "tool":
            if answered:
                history.last, answered = [], False
            text = content_text(message.get("content"))
            name = message.get("name")
            outcome = history.result(
                str(message.get("tool_call_id")), text, False, str(name) if name is not None else None
            )
            history.last.append(outcome)
        elif role == "user":
            if not history.prompt:
                history.prompt = content_text(message.get("content"))
            history.last, answered = [], False
    system = [
        message.get("content") for message in messages if message.get("role") in ("system", "developer")
    ]
    tool_names = []
    for tool in json_objects(body.get("tools")):
        function = tool.get("function")
        tool_names.append(str(function.get("name") if isinstance(function, Mapping) else tool.get("type")))
    turns = [message for message in messages if message.get("role") not in ("system", "developer")]
    return history.conversation(API, system=system, tool_names=tool_names, messages=turns)


_ids = itertools.count(1)
_USAGE = {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}


def render_completion(reply: Reply, model: str) -> dict[str, Any]:
    """The reply as a ``chat.completion`` (what a non-streaming request gets)."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None, "refusal": None}
    if reply.calls:
        message["tool_calls"] = [
            {
                "id": f"call_fake{next(_ids):06d}",
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(dict(call.input))},
            }
            for call in reply.calls
        ]
    return {
        "id": f"chatcmpl-fake{next(_ids):06d}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "stop" if reply.final else "tool_calls",
            }
        ],
        "usage": _USAGE,
    }


def stream_chunks(completion: Mapping[str, Any], include_usage: bool) -> list[Any]:
    """The server-sent ``data:`` payloads that stream ``completion``: the role, the text, each
    tool call whole, the finish reason, the usage when asked (``stream_options.include_usage``),
    then ``[DONE]``."""
    head = {key: completion[key] for key in ("id", "created", "model")}
    choice = completion["choices"][0]
    message = choice["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        payload: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {**head, "object": "chat.completion.chunk", "choices": [payload]}

    chunks: list[Any] = [chunk({"role": "assistant", "content": ""})]
    if message.get("content"):
        chunks.append(chunk({"content": message["content"]}))
    for index, call in enumerate(message.get("tool_calls") or []):
        chunks.append(chunk({"tool_calls": [{"index": index, **call}]}))
    chunks.append(chunk({}, choice["finish_reason"]))
    if include_usage:
        chunks.append(
            {**head, "object": "chat.completion.chunk", "choices": [], "usage": completion["usage"]}
        )
    chunks.append("[DONE]")
    return chunks


class ChatCompletionsApi(WireApi):
    """The routes under ``prefix``; every request is recorded, the script answers
    ``/chat/completions``."""

    name = API

    def __init__(self, script: Script, recorder: Recorder, prefix: str = "/v1") -> None:
        super().__init__(script, recorder)
        self.prefix = prefix

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post(f"{self.prefix}/chat/completions", self.completions)
        app.router.add_get(f"{self.prefix}/models", self.models)

    def error(self, status: int, message: str) -> web.Response:
        return web.json_response(
            {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": None}},
            status=status,
        )

    async def completions(self, request: web.Request) -> web.StreamResponse:
        body = await self.json_body(request)
        if not isinstance(body, Mapping) or not isinstance(body.get("messages"), list):
            self.record(request, body, status=400)
            return self.error(400, "messages: a list is required")
        conversation = parse_request(body)
        reply = self.script.reply(conversation)
        completion = render_completion(reply, str(body.get("model", "fake-model")))
        if not body.get("stream"):
            return await self.respond(request, body, conversation, reply, completion)
        self.record(request, body, conversation, reply, response=completion)
        options = body.get("stream_options")
        usage = isinstance(options, Mapping) and bool(options.get("include_usage"))
        stream = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await stream.prepare(request)
        for data in stream_chunks(completion, usage):  # ([DONE] is not JSON: written as it is)
            text = data if isinstance(data, str) else json.dumps(data)
            await stream.write(f"data: {text}\n\n".encode())
        await stream.write_eof()
        return stream

    async def models(self, request: web.Request) -> web.Response:
        self.record(request, None)
        return web.json_response({"object": "list", "data": [{"id": "fake-model", "object": "model"}]})
