"""The runtimes whose hooks loopwatch answers, by the name used on the command line and in
the gateway's route (``loopwatch hook NAME``, ``POST /v1/hooks/NAME``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loopwatch.streams.gateway.hooks import claude_code, codex, gemini
from loopwatch.streams.gateway.hooks.plan import HookPlan, PromptCounter

__all__ = ["RUNTIMES", "Runtime"]


@dataclass(frozen=True)
class Runtime:
    name: str
    plan: Callable[[dict[str, Any], PromptCounter, str, bool], HookPlan]
    default_agent: str


RUNTIMES: dict[str, Runtime] = {
    "claude-code": Runtime("claude-code", claude_code.plan, "claude-code"),
    "codex": Runtime("codex", codex.plan, "codex"),
    "gemini": Runtime("gemini", gemini.plan, "gemini"),
}
