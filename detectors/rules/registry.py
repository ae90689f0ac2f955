"""The rules, in the order the step asks them (:mod:`detectors.rules.base`).

OpenClaw's ``detectToolCallLoop`` rules come first, in its first-match order (spec §5:
unknown tool, global circuit breaker, known poll, ping-pong, generic repeat's critical,
argument churn under 2026-08, generic repeat's warning); then the post-compaction guard and
the churn lease, which only watch outcomes and calls; then loopwatch's own rules, each of
which lets a critical win over the verdict so far; the loop budget last (its loop spend starts
at the verdicts of the rules before it).

Adding a rule: one module under ``detectors/rules/`` and one line here (or
:func:`register` for a rule of one's own, e.g. in a test). Whenever its rules are set, the
registry hands on what they declare beside their hooks: their config sections to the config
(:func:`config.rule_sections.hand_in`: ``loopwatch.detectors``, ``check-config``, the presets,
the JSON Schema), their runtime words to :mod:`detectors.runtime_texts`, their state loaders
to :mod:`detectors.rule_state`. setup.py compiles the modules imported below
(:func:`detectors.core_build.compiled_modules`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

from loopwatch.config.loop_detection import ResolvedLoopDetection
from loopwatch.config.rule_sections import hand_in
from loopwatch.detectors.rule_state import LOADERS
from loopwatch.detectors.rules import (
    argument_churn,
    argument_churn_stale,
    call_cycle,
    delegation_depth,
    edit_undo,
    generic_repeat,
    global_circuit_breaker,
    known_poll_no_progress,
    loop_budget,
    ping_pong,
    post_compaction_guard,
    run_no_progress,
    same_call_streak,
    same_failure,
    unknown_tool_repeat,
)
from loopwatch.detectors.rules.base import Rule
from loopwatch.detectors.runtime_texts import use_rule_texts

__all__ = ["REGISTRY", "Hooks", "Registry", "register", "registered", "unregister"]

_DEFAULT_RULES: Final[tuple[Rule, ...]] = (
    unknown_tool_repeat.RULE,
    global_circuit_breaker.RULE,
    known_poll_no_progress.RULE,
    ping_pong.RULE,
    generic_repeat.CRITICAL_RULE,
    argument_churn.RULE,
    generic_repeat.WARNING_RULE,
    post_compaction_guard.RULE,
    argument_churn_stale.RULE,
    run_no_progress.RULE,
    edit_undo.RULE,
    same_call_streak.RULE,
    call_cycle.RULE,
    same_failure.RULE,
    delegation_depth.RULE,
    loop_budget.RULE,
)


def _overrides(rule: Rule, hook: str) -> bool:
    return getattr(type(rule), hook) is not getattr(Rule, hook)


class Hooks:
    """For each hook, the rules that have it, in registry order (the step's loops)."""

    __slots__ = (
        "after_call",
        "after_record",
        "on_call",
        "on_compaction_retry",
        "on_result",
        "openclaw_on_call",
        "own_on_call",
    )

    def __init__(self, rules: tuple[Rule, ...]) -> None:
        self.on_call = tuple(rule for rule in rules if _overrides(rule, "on_call"))
        # the step asks OpenClaw's rules first (first match wins), then the others in order;
        # the registry keeps OpenClaw's rules first, so this is the registry order
        self.openclaw_on_call = tuple(rule for rule in self.on_call if rule.openclaw)
        self.own_on_call = tuple(rule for rule in self.on_call if not rule.openclaw)
        self.after_call = tuple(rule for rule in rules if _overrides(rule, "after_call"))
        self.after_record = tuple(rule for rule in rules if _overrides(rule, "after_record"))
        self.on_result = tuple(rule for rule in rules if _overrides(rule, "on_result"))
        self.on_compaction_retry = tuple(rule for rule in rules if _overrides(rule, "on_compaction_retry"))


_KEPT_CONFIGS: Final = 4096


class Registry:
    """The ordered rules; their hooks (:attr:`all`), and those of the rules active under one
    resolved config (:meth:`for_config`, kept per config object while it is in use)."""

    __slots__ = ("_active", "_last", "_last_hooks", "all", "rules")

    def __init__(self, rules: tuple[Rule, ...]) -> None:
        self.rules: tuple[Rule, ...] = ()
        self.all = Hooks(())
        self._active: dict[int, tuple[ResolvedLoopDetection, Hooks]] = {}
        self._last: ResolvedLoopDetection | None = None  # the config asked last, and its hooks
        self._last_hooks = self.all
        self.set(rules)

    def set(self, rules: tuple[Rule, ...]) -> None:
        flags = [rule.openclaw for rule in rules]
        if True in flags and False in flags[: len(flags) - flags[::-1].index(True)]:
            raise ValueError("OpenClaw's rules (openclaw=True) come before every other rule")
        self.rules = rules
        self.all = Hooks(rules)
        self._active = {}
        self._last = None
        LOADERS.clear()
        for rule in rules:
            if _overrides(rule, "load_state"):
                LOADERS[rule.name] = rule.load_state
        hand_in([rule.section for rule in rules if rule.section is not None])
        stops: dict[str, str] = {}
        for rule in rules:
            stops.update(rule.runtime_stops)
        loops = {rule.name: rule.runtime_loop for rule in rules if rule.runtime_loop is not None}
        use_rule_texts(loops, stops)

    def for_config(self, resolved: ResolvedLoopDetection) -> Hooks:
        """The hooks of the rules :meth:`Rule.active` under ``resolved``."""
        if resolved is self._last:
            return self._last_hooks
        kept = self._active.get(id(resolved))
        if kept is not None and kept[0] is resolved:
            hooks = kept[1]
        else:
            hooks = Hooks(tuple(rule for rule in self.rules if rule.active(resolved)))
            if len(self._active) >= _KEPT_CONFIGS:
                self._active = {}
            self._active[id(resolved)] = (resolved, hooks)  # the config is kept: its id stays its own
        self._last = resolved
        self._last_hooks = hooks
        return hooks


REGISTRY: Final = Registry(_DEFAULT_RULES)


def register(rule: Rule, before: Rule | None = None) -> None:
    """Add a rule at the end, or just before ``before``."""
    rules = list(REGISTRY.rules)
    rules.insert(rules.index(before) if before is not None else len(rules), rule)
    REGISTRY.set(tuple(rules))


def unregister(rule: Rule) -> None:
    REGISTRY.set(tuple(r for r in REGISTRY.rules if r is not rule))


@contextmanager
def registered(rule: Rule, before: Rule | None = None) -> Iterator[Rule]:
    """The rule registered for the ``with`` block."""
    register(rule, before)
    try:
        yield rule
    finally:
        unregister(rule)
