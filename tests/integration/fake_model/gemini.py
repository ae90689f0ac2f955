"""The Gemini API (``generativelanguage`` v1beta), as Gemini CLI uses it through ``@google/genai``:
``POST /{version}/models/{model}:streamGenerateContent?alt=sse`` (server-sent events, one
``GenerateContentResponse`` per ``data:`` line), ``:generateContent`` (one JSON response, used
for Gemini CLI's side requests) and ``:countTokens``; ``GET /{version}/models`` lists one model.

A request is ``{"contents": [{"role": "user" | "model", "parts": [...]}], "systemInstruction",
"tools": [{"functionDeclarations": [...]}], "generationConfig"}``. The model asks for a tool with
a ``{"functionCall": {"id", "name", "args"}}`` part; the result comes back in a user content as
``{"functionResponse": {"id", "name", "response": {...}}}``.

A side request that wants JSON (``generationConfig.responseMimeType`` is
``application/json``) gets ``json_reply`` (by default ``{"next_speaker": "user", ...}``, what
Gemini CLI's "who speaks next" check expects), not the script's answer.

``FakeModel(script, GeminiApi)`` serves this API (``functools.partial(GeminiApi, json_reply=...)``
for another ``json_reply``); Gemini CLI finds it with ``GOOGLE_GEMINI_BASE_URL=model.url``.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web

from tests.integration.fake_model.script import Conversation, Recorder, Reply, Script, all_strings
from tests.integration.fake_model.wire import ToolHistory, WireApi, estimated_tokens, json_objects

__all__ = [
    "GeminiApi",
    "default_json_reply",
    "parse_request",
    "render_response",
    "wants_json",
]

API = "gemini"
JsonReply = Callable[[Mapping[str, Any]], Any]


def _parts(content: Any) -> list[Mapping[str, Any]]:
    return json_objects(content.get("parts")) if isinstance(content, Mapping) else []


def _response_text(response: Any) -> str:
    """A ``functionResponse.response`` as text: its ``output``/``error`` strings, else all strings."""
    if isinstance(response, Mapping):
        picked = [str(response[key]) for key in ("output", "error") if isinstance(response.get(key), str)]
        if picked:
            return "\n".join(picked)
    return "\n".join(all_strings(response))


def parse_request(body: Mapping[str, Any]) -> Conversation:
    contents = json_objects(body.get("contents"))
    history = ToolHistory()
    for content in contents:
        role = content.get("role")
        if role == "model":
            history.turn += 1
        mine = []
        for part in _parts(content):
            call = part.get("functionCall")
            response = part.get("functionResponse")
            if isinstance(call, Mapping):
                history.call(str(call.get("id") or call.get("name")), str(call.get("name")), call.get("args"))
            elif isinstance(response, Mapping):
                call_id = str(response.get("id") or response.get("name"))
                inner = response.get("response")
                is_error = isinstance(inner, Mapping) and "error" in inner
                name = str(response.get("name"))
                mine.append(history.result(call_id, _response_text(inner), is_error, name))
            elif role == "user" and not history.prompt and isinstance(part.get("text"), str):
                text = str(part["text"])
                if not text.lstrip().startswith("<"):  # not <session_context> or other preambles
                    history.prompt = text
        if role == "user":
            history.last = mine
    declared = [
        str(function.get("name"))
        for tool in json_objects(body.get("tools"))
        for function in json_objects(tool.get("functionDeclarations"))
    ]
    return history.conversation(
        API, system=body.get("systemInstruction"), tool_names=declared, messages=contents
    )


def wants_json(body: Mapping[str, Any]) -> bool:
    config = body.get("generationConfig")
    return isinstance(config, Mapping) and config.get("responseMimeType") == "application/json"


def default_json_reply(body: Mapping[str, Any]) -> Any:
    """The answer to a side request for JSON: the model leaves the next turn to the user."""
    return {"reasoning": "The fake model has finished its turn.", "next_speaker": "user"}


_ids = itertools.count(1)
_USAGE = {"promptTokenCount": 10, "candidatesTokenCount": 10, "totalTokenCount": 20}


def render_response(reply: Reply, model: str) -> dict[str, Any]:
    """The reply as one ``GenerateContentResponse``."""
    parts: list[dict[str, Any]] = []
    if reply.text:
        parts.append({"text": reply.text})
    for call in reply.calls:
        parts.append(
            {
                "functionCall": {
                    "id": f"call_fake{next(_ids):06d}",
                    "name": call.name,
                    "args": dict(call.input),
                }
            }
        )
    return {
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": _USAGE,
        "modelVersion": model,
        "responseId": f"resp_fake{next(_ids):06d}",
    }


class GeminiApi(WireApi):
    """The routes; every request is recorded, the script answers the model's turns."""

    name = API

    def __init__(
        self, script: Script, recorder: Recorder, json_reply: JsonReply = default_json_reply
    ) -> None:
        super().__init__(script, recorder)
        self.json_reply = json_reply

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post("/{version}/models/{model_method}", self.model_method)
        app.router.add_get("/{version}/models", self.models)

    def error(self, status: int, message: str) -> web.Response:
        return web.json_response(
            {"error": {"code": status, "message": message, "status": "INVALID_ARGUMENT"}}, status=status
        )

    async def model_method(self, request: web.Request) -> web.StreamResponse:
        model, _, method = request.match_info["model_method"].partition(":")
        body = await self.json_body(request)
        if not isinstance(body, Mapping):
            self.record(request, body, status=400)
            return self.error(400, "the body must be a JSON object")
        if method == "countTokens":
            self.record(request, body)
            return web.json_response({"totalTokens": estimated_tokens(body)})
        if method not in ("generateContent", "streamGenerateContent"):
            self.record(request, body, status=404)
            return self.error(404, f"fake model: no method {method}")
        conversation = None if wants_json(body) else parse_request(body)
        if conversation is None:
            reply = Reply(text=json.dumps(self.json_reply(body)))
        else:
            reply = self.script.reply(conversation)
        response = render_response(reply, model)
        events = [(None, response)] if method == "streamGenerateContent" else None
        return await self.respond(request, body, conversation, reply, response, events, newline="\r\n")

    async def models(self, request: web.Request) -> web.Response:
        self.record(request, None)
        model = {"name": "models/gemini-2.5-flash", "supportedGenerationMethods": ["generateContent"]}
        return web.json_response({"models": [model]})
