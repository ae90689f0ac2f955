"""What a scripted model answers, independent of the wire API.

An API module (``anthropic.py``, ``openai_responses.py``, ``gemini.py``) turns a request into a
:class:`Conversation`, asks the :class:`Script` for a :class:`Reply`, renders the reply in its
wire format, and records the exchange in a :class:`Recorder`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = [
    "Conversation",
    "Exchange",
    "Recorder",
    "RepeatTool",
    "Reply",
    "Router",
    "Script",
    "Steps",
    "StopWhen",
    "ToolCall",
    "ToolOutcome",
    "When",
    "all_strings",
    "refused_with",
]


@dataclass(frozen=True)
class ToolCall:
    """A tool call the model proposes."""

    name: str
    input: Mapping[str, Any]


@dataclass(frozen=True)
class ToolOutcome:
    """A tool result the client sent back, with the call it answers (when the request holds it)."""

    call_id: str
    name: str | None
    input: Any
    text: str
    is_error: bool


@dataclass(frozen=True)
class Conversation:
    """One request to the model, as the script sees it."""

    api: str
    prompt: str  # the first user message's own text (a subagent's: its task prompt)
    system: str
    tool_names: tuple[str, ...]
    turn: int  # the model's answers so far in this conversation (0 on the first request)
    outcomes: tuple[ToolOutcome, ...]  # every tool result, oldest first
    last_outcomes: tuple[ToolOutcome, ...]  # the tool results of the last message
    texts: tuple[str, ...]  # every string in the messages, for "did X reach the model"

    def mentions(self, needle: str) -> bool:
        return any(needle in text for text in self.texts)


@dataclass(frozen=True)
class Reply:
    """Tool calls (a tool-use turn), or none (a final answer with ``text``)."""

    calls: tuple[ToolCall, ...] = ()
    text: str = ""

    @property
    def final(self) -> bool:
        return not self.calls


class Script(Protocol):
    def reply(self, conversation: Conversation) -> Reply: ...


StopWhen = Callable[[Conversation], bool]


def refused_with(marker: str) -> StopWhen:
    """Stop once a tool result of the last message says ``marker`` (a hook's refusal reason)."""

    def stop(conversation: Conversation) -> bool:
        return any(marker in outcome.text for outcome in conversation.last_outcomes)

    return stop


class RepeatTool:
    """The same tool call every turn (``per_turn`` times in one turn), until ``stop_when`` holds
    or ``max_calls`` calls were made."""

    def __init__(
        self,
        name: str,
        input: Mapping[str, Any],
        *,
        stop_when: StopWhen | None = None,
        max_calls: int = 30,
        per_turn: int = 1,
        final_text: str = "Done.",
    ) -> None:
        self.call = ToolCall(name, dict(input))
        self.stop_when = stop_when
        self.max_calls = max_calls
        self.per_turn = per_turn
        self.final_text = final_text

    def reply(self, conversation: Conversation) -> Reply:
        if self.call.name not in conversation.tool_names:
            return Reply(text=self.final_text)  # a side request without tools (titles, summaries)
        if self.stop_when is not None and conversation.last_outcomes and self.stop_when(conversation):
            return Reply(text=self.final_text)
        calls = sum(1 for outcome in conversation.outcomes if outcome.name == self.call.name)
        if calls >= self.max_calls:
            return Reply(text=self.final_text)
        return Reply(calls=(self.call,) * min(self.per_turn, self.max_calls - calls))


class When:
    """``then`` once ``condition`` holds for the conversation, ``otherwise`` before."""

    def __init__(self, condition: StopWhen, then: Script, otherwise: Script) -> None:
        self.condition = condition
        self.then = then
        self.otherwise = otherwise

    def reply(self, conversation: Conversation) -> Reply:
        if self.condition(conversation):
            return self.then.reply(conversation)
        return self.otherwise.reply(conversation)


class Steps:
    """A fixed reply per turn (turn 0 first); the final text after the last."""

    def __init__(self, *replies: Reply, final_text: str = "Done.") -> None:
        self.replies = replies
        self.final_text = final_text

    def reply(self, conversation: Conversation) -> Reply:
        if conversation.turn < len(self.replies):
            return self.replies[conversation.turn]
        return Reply(text=self.final_text)


class Router:
    """The script of the first route whose key occurs in the conversation's prompt, else ``default``
    (subagents get their own scripts by their task prompts)."""

    def __init__(self, routes: Mapping[str, Script], default: Script | None = None) -> None:
        self.routes = dict(routes)
        self.default = default

    def reply(self, conversation: Conversation) -> Reply:
        for key, script in self.routes.items():
            if key in conversation.prompt:
                return script.reply(conversation)
        if self.default is not None:
            return self.default.reply(conversation)
        return Reply(text="Done.")


@dataclass(frozen=True)
class Exchange:
    """One request the fake model received: its body, and the script's reply with the body it
    was sent as (``reply`` is None for requests the script was not asked about)."""

    api: str
    method: str
    path: str
    body: Any
    conversation: Conversation | None
    reply: Reply | None
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    response: Any = None


class Recorder:
    """Every exchange, in arrival order; safe to read from the test's thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._exchanges: list[Exchange] = []

    def add(self, exchange: Exchange) -> None:
        with self._lock:
            self._exchanges.append(exchange)

    def exchanges(self) -> list[Exchange]:
        with self._lock:
            return list(self._exchanges)

    def conversations(self) -> list[Conversation]:
        """The model turns (requests that reached the script), in arrival order."""
        return [e.conversation for e in self.exchanges() if e.conversation is not None]

    def __iter__(self) -> Iterator[Exchange]:
        return iter(self.exchanges())

    def __len__(self) -> int:
        return len(self.exchanges())


def all_strings(value: Any) -> Iterator[str]:
    """Every string inside a JSON value (keys excluded)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from all_strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from all_strings(item)
