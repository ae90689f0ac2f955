"""The runtimes whose hooks loopwatch answers, by the name used on the command line and in
the gateway's route (``loopwatch hook NAME``, ``POST /v1/hooks/NAME``)."""

from __future__ import annotations

TYPE_CHECKING = False  # (typing itself is not imported for it: the command hook starts quickly)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from loopwatch.streams.gateway.hooks.plan import HookPlan, PromptCounter

    Plan = Callable[[dict[str, Any], PromptCounter, str, bool], HookPlan]

__all__ = ["RUNTIMES", "Runtime", "event_problem"]


class Runtime:
    """A runtime: its name, its plan, the agent id of its runs by default, and the hook events
    the plan acts on (``hook_event_name``: the module's ``EVENTS``, as the README wires them).
    Its module is imported when first needed: a command hook imports its own runtime's only."""

    __slots__ = ("_load", "_loaded", "default_agent", "name")

    def __init__(
        self, name: str, load: Callable[[], tuple[Plan, tuple[str, ...]]], default_agent: str
    ) -> None:
        self.name = name
        self.default_agent = default_agent
        self._load = load
        self._loaded: tuple[Plan, frozenset[str]] | None = None

    def _module(self) -> tuple[Plan, frozenset[str]]:
        if self._loaded is None:
            plan, events = self._load()
            self._loaded = plan, frozenset(events)
        return self._loaded

    @property
    def plan(self) -> Plan:
        return self._module()[0]

    @property
    def events(self) -> frozenset[str]:
        return self._module()[1]

    def __repr__(self) -> str:
        return f"Runtime({self.name!r})"


def _claude_code() -> tuple[Plan, tuple[str, ...]]:
    from loopwatch.streams.gateway.hooks import claude_code

    return claude_code.plan, claude_code.EVENTS


def _codex() -> tuple[Plan, tuple[str, ...]]:
    from loopwatch.streams.gateway.hooks import codex

    return codex.plan, codex.EVENTS


def _gemini() -> tuple[Plan, tuple[str, ...]]:
    from loopwatch.streams.gateway.hooks import gemini

    return gemini.plan, gemini.EVENTS


RUNTIMES: dict[str, Runtime] = {
    "claude-code": Runtime("claude-code", _claude_code, "claude-code"),
    "codex": Runtime("codex", _codex, "codex"),
    "gemini": Runtime("gemini", _gemini, "gemini"),
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
