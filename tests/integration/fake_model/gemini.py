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

``FakeGeminiModel(script)`` is ``FakeModel`` serving this API; Gemini CLI finds it with
``GOOGLE_GEMINI_BASE_URL=model.url``.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Mapping
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
from tests.integration.fake_model.server import FakeModel

__all__ = [
    "FakeGeminiModel",
    "GeminiApi",
    "default_json_reply",
    "parse_request",
    "render_response",
    "wants_json",
]

API = "gemini"
JsonReply = Callable[[Mapping[str, Any]], Any]


def _parts(content: Any) -> list[Mapping[str, Any]]:
    parts = content.get("parts") if isinstance(content, Mapping) else None
    return [part for part in parts if isinstance(part, Mapping)] if isinstance(parts, list) else []


def _response_text(response: Any) -> str:
    """A ``functionResponse.response`` as text: its ``output``/``error`` strings, else all strings."""
    if isinstance(response, Mapping):
        picked = [str(response[key]) for key in ("output", "error") if isinstance(response.get(key), str)]
        if picked:
            return "\n".join(picked)
    return "\n".join(all_strings(response))


def parse_request(body: Mapping[str, Any]) -> Conversation:
    raw = body.get("contents")
    contents = [c for c in raw if isinstance(c, Mapping)] if isinstance(raw, list) else []
    calls: dict[str, tuple[str | None, Any]] = {}
    outcomes: list[ToolOutcome] = []
    last: list[ToolOutcome] = []
    turn = 0
    prompt = ""
    for content in contents:
        role = content.get("role")
        if role == "model":
            turn += 1
        mine: list[ToolOutcome] = []
        for part in _parts(content):
            call = part.get("functionCall")
            response = part.get("functionResponse")
            if isinstance(call, Mapping):
                calls[str(call.get("id") or call.get("name"))] = (str(call.get("name")), call.get("args"))
            elif isinstance(response, Mapping):
                call_id = str(response.get("id") or response.get("name"))
                name, call_input = calls.get(call_id, (str(response.get("name")), None))
                inner = response.get("response")
                is_error = isinstance(inner, Mapping) and "error" in inner
                mine.append(ToolOutcome(call_id, name, call_input, _response_text(inner), is_error))
            elif role == "user" and not prompt and isinstance(part.get("text"), str):
                text = str(part["text"])
                if not text.lstrip().startswith("<"):  # not <session_context> or other preambles
                    prompt = text
        outcomes += mine
        if role == "user":
            last = mine
    declared: list[str] = []
    tools = body.get("tools")
    for tool in tools if isinstance(tools, list) else []:
        functions = tool.get("functionDeclarations") if isinstance(tool, Mapping) else None
        for function in functions if isinstance(functions, list) else []:
            if isinstance(function, Mapping):
                declared.append(str(function.get("name")))
    return Conversation(
        api=API,
        prompt=prompt,
        system="\n".join(all_strings(body.get("systemInstruction"))),
        tool_names=tuple(declared),
        turn=turn,
        outcomes=tuple(outcomes),
        last_outcomes=tuple(last),
        texts=tuple(all_strings(contents)),
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


def _error(status: int, message: str) -> web.Response:
    return web.json_response(
        {"error": {"code": status, "message": message, "status": "INVALID_ARGUMENT"}}, status=status
    )


class GeminiApi:
    """The routes; every request is recorded, the script answers the model's turns."""

    def __init__(
        self, script: Script, recorder: Recorder, json_reply: JsonReply = default_json_reply
    ) -> None:
        self.script = script
        self.recorder = recorder
        self.json_reply = json_reply

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post("/{version}/models/{model_method}", self.model_method)
        app.router.add_get("/{version}/models", self.models)

    def _record(
        self,
        request: web.Request,
        body: Any,
        conversation: Conversation | None,
        reply: Reply | None,
        status: int,
    ) -> None:
        self.recorder.add(
            Exchange(
                API, request.method, request.path, body, conversation, reply, status, dict(request.headers)
            )
        )

    async def model_method(self, request: web.Request) -> web.StreamResponse:
        model, _, method = request.match_info["model_method"].partition(":")
        try:
            body = await request.json()
        except ValueError:
            body = None
        if not isinstance(body, Mapping):
            self._record(request, body, None, None, 400)
            return _error(400, "the body must be a JSON object")
        if method == "countTokens":
            self._record(request, body, None, None, 200)
            return web.json_response({"totalTokens": max(1, len(json.dumps(body)) // 4)})
        if method not in ("generateContent", "streamGenerateContent"):
            self._record(request, body, None, None, 404)
            return _error(404, f"fake model: no method {method}")
        conversation = parse_request(body)
        if wants_json(body):
            reply = Reply(text=json.dumps(self.json_reply(body)))
            self._record(request, body, None, reply, 200)
        else:
            reply = self.script.reply(conversation)
            self._record(request, body, conversation, reply, 200)
        response = render_response(reply, model)
        if method == "generateContent":
            return web.json_response(response)
        stream = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await stream.prepare(request)
        await stream.write(f"data: {json.dumps(response)}\r\n\r\n".encode())
        await stream.write_eof()
        return stream

    async def models(self, request: web.Request) -> web.Response:
        self._record(request, None, None, None, 200)
        model = {"name": "models/gemini-2.5-flash", "supportedGenerationMethods": ["generateContent"]}
        return web.json_response({"models": [model]})


class FakeGeminiModel(FakeModel):
    """``with FakeGeminiModel(script) as model:`` serves the Gemini API at ``model.url``."""

    def __init__(
        self, script: Script, host: str = "127.0.0.1", json_reply: JsonReply = default_json_reply
    ) -> None:
        super().__init__(script, host)
        self.json_reply = json_reply

    def _app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        GeminiApi(self.script, self.recorder, self.json_reply).add_routes(app)

        async def unknown(request: web.Request) -> web.Response:
            body = await request.read()
            text = body.decode(errors="replace")
            self.recorder.add(Exchange("unknown", request.method, request.path, text, None, None, 404))
            return _error(404, f"fake model: no route {request.method} {request.path}")

        app.router.add_route("*", "/{tail:.*}", unknown)
        return app
