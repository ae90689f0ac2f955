"""The runtimes whose hooks loopwatch answers, by the name used on the command line and in
the gateway's route (``loopwatch hook NAME``, ``POST /v1/hooks/NAME``)."""

from __future__ import annotations

from loopwatch.streams.gateway.hooks import claude_code, codex, gemini

TYPE_CHECKING = False  # (typing itself is not imported for it: the command hook starts quickly)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from loopwatch.streams.gateway.hooks.plan import HookPlan, PromptCounter

__all__ = ["RUNTIMES", "Runtime", "event_problem"]


class Runtime:
    """A runtime: its name, its plan, the agent id of its runs by default, and the hook events
    the plan acts on (``hook_event_name``: the module's ``EVENTS``, as the README wires them)."""

    __slots__ = ("default_agent", "events", "name", "plan")

    def __init__(
        self,
        name: str,
        plan: Callable[[dict[str, Any], PromptCounter, str, bool], HookPlan],
        default_agent: str,
        events: frozenset[str],
    ) -> None:
        self.name = name
        self.plan = plan
        self.default_agent = default_agent
        self.events = events

    def __repr__(self) -> str:
        return f"Runtime({self.name!r})"


RUNTIMES: dict[str, Runtime] = {
    "claude-code": Runtime("claude-code", claude_code.plan, "claude-code", frozenset(claude_code.EVENTS)),
    "codex": Runtime("codex", codex.plan, "codex", frozenset(codex.EVENTS)),
    "gemini": Runtime("gemini", gemini.plan, "gemini", frozenset(gemini.EVENTS)),
}


def event_problem(runtime: Runtime, hook: dict[str, Any]) -> str | None:
    """Why loopwatch does nothing with this hook call, when that is surely a mistake (a hook
    wired to the wrong runtime's command, or to an event it does not act on); None otherwise."""
    name = hook.get("hook_event_name")
    if not isinstance(name, str):
        return f"the hook input has no hook_event_name ({runtime.name} sends one with every call)"
    if name in runtime.events:
        return None
    owners = [other.name for other in RUNTIMES.values() if name in other.events]
    if owners:
        owner = " and ".join(owners)
        return f"{name} is a hook event of {owner}, not of {runtime.name}: check the hook's command"
    known = ", ".join(sorted(runtime.events))
    return f"loopwatch acts on no {runtime.name} hook event {name!r} (it does on {known})"
