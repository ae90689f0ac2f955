"""loopwatch's own rules (docs/own-rules.md): the ``detectors`` object of a ``loopwatch`` section.

Rules:

* Globally under ``loopwatch.detectors``; per agent under ``agents.list[].loopwatch.detectors``
  or ``agents.entries.<id>.loopwatch.detectors``, merged over the global one rule by rule,
  key by key (like ``loopDetection`` blocks).
* One object per rule, every key optional: ``runNoProgress`` {enabled false,
  warningThreshold 20, windowSize 30}, ``editUndo`` {enabled false, warningThreshold 3,
  criticalThreshold 5}, ``loopBudget`` {usd null}; and the fleet-wide ``toolOutage`` and
  ``systemicLoop``, global only.
* Validation reports every problem with its path: unknown rules and keys, wrong types, and
  a warning threshold not below the critical one (``windowSize`` for ``runNoProgress``).

Off by default (the budget unset), so OpenClaw parity stays exact unless an operator opts in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from loopwatch.config.errors import ConfigProblem

__all__ = ["DEFAULT_OWN_RULES", "FLEET_RULES", "OwnRules", "merge_rules", "resolve_rules", "validate_rules"]

RawRules = dict[str, Any]

#: rule -> key -> (kind, default)
RULES: Final[dict[str, dict[str, tuple[str, object]]]] = {
    "runNoProgress": {
        "enabled": ("bool", False),
        "warningThreshold": ("positive", 20),
        "windowSize": ("window", 30),
    },
    "editUndo": {
        "enabled": ("bool", False),
        "warningThreshold": ("positive", 3),
        "criticalThreshold": ("positive", 5),
    },
    "loopBudget": {"usd": ("usd", None)},
    "toolOutage": {
        "enabled": ("bool", True),
        "bucketSeconds": ("positive", 60),
        "windowBuckets": ("positive", 5),
        "minRuns": ("positive", 5),
        "minDistinctArgs": ("positive", 3),
        "block": ("bool", False),
        "blockSeconds": ("positive", 60),
    },
    "systemicLoop": {
        "enabled": ("bool", True),
        "bucketSeconds": ("positive", 300),
        "windowBuckets": ("positive", 12),
        "minRuns": ("positive", 10),
        "minShare": ("share", 0.2),
    },
}
#: the rules that watch the whole fleet: set globally only
FLEET_RULES: Final = ("toolOutage", "systemicLoop")
MAX_WINDOW: Final = 1000
_ORDER: Final = (
    ("runNoProgress", "warningThreshold", "windowSize"),
    ("editUndo", "warningThreshold", "criticalThreshold"),
)


def _problem(kind: str, value: object) -> str | None:
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    integral = number and float(value).is_integer()  # type: ignore[arg-type]
    if kind == "bool":
        return None if isinstance(value, bool) else "must be a boolean"
    if kind == "positive":
        return None if integral and value > 0 else "must be a positive integer"  # type: ignore[operator]
    if kind == "window":
        ok = integral and 0 < value <= MAX_WINDOW  # type: ignore[operator]
        return None if ok else f"must be a positive integer of at most {MAX_WINDOW}"
    if kind == "usd":
        return None if value is None or (number and value > 0) else "must be a positive number (USD) or null"  # type: ignore[operator]
    if kind == "share":
        return None if number and 0 < value <= 1 else "must be a number above 0 and at most 1"  # type: ignore[operator]
    raise AssertionError(kind)


def _value(rules: RawRules, rule: str, key: str) -> Any:
    block = rules.get(rule)
    value = block.get(key) if isinstance(block, dict) else None
    return RULES[rule][key][1] if value is None and key != "usd" else value


def validate_rules(raw: object, path: str, per_agent: bool = False) -> list[ConfigProblem]:
    """Every problem of one ``detectors`` object."""
    if not isinstance(raw, dict):
        return [ConfigProblem(path, "must be an object")]
    problems: list[ConfigProblem] = []
    for rule, block in raw.items():
        where = f"{path}.{rule}"
        keys = RULES.get(rule)
        if keys is None:
            problems.append(ConfigProblem(where, f"unknown rule (known: {', '.join(RULES)})"))
            continue
        if per_agent and rule in FLEET_RULES:
            problems.append(
                ConfigProblem(where, "a fleet-wide rule: set it in the global loopwatch.detectors")
            )
            continue
        if not isinstance(block, dict):
            problems.append(ConfigProblem(where, "must be an object"))
            continue
        for key, value in block.items():
            spec = keys.get(key)
            if spec is None:
                problems.append(ConfigProblem(f"{where}.{key}", f"unknown key (known: {', '.join(keys)})"))
                continue
            message = _problem(spec[0], value)
            if message:
                problems.append(ConfigProblem(f"{where}.{key}", message))
    if not problems:
        for rule, low, high in _ORDER:
            block = raw.get(rule)
            given = isinstance(block, dict) and (low in block or high in block)
            if given and _value(raw, rule, low) >= _value(raw, rule, high):
                problems.append(ConfigProblem(f"{path}.{rule}.{low}", f"must be lower than {high}"))
    return problems


def merge_rules(global_rules: RawRules | None, agent_rules: RawRules | None) -> RawRules | None:
    """The agent's rules over the global ones, rule by rule and key by key."""
    if agent_rules is None:
        return global_rules
    if global_rules is None:
        return agent_rules
    merged = dict(global_rules)
    for rule, block in agent_rules.items():
        base = global_rules.get(rule)
        merged[rule] = {**base, **block} if isinstance(base, dict) and isinstance(block, dict) else block
    return merged


@dataclass(frozen=True, slots=True)
class OwnRules:
    """The in-run rules of one agent, resolved (the fleet-wide ones are read elsewhere)."""

    run_no_progress: bool = False
    run_no_progress_warning: int = 20
    run_no_progress_window: int = 30
    edit_undo: bool = False
    edit_undo_warning: int = 3
    edit_undo_critical: int = 5
    loop_budget_usd: float | None = None

    @property
    def any(self) -> bool:
        """Whether any in-run rule of loopwatch's own is on."""
        return self.run_no_progress or self.edit_undo or self.loop_budget_usd is not None

    def as_dict(self) -> dict[str, Any]:
        """The resolved rules under their file names."""
        return {
            "runNoProgress": {
                "enabled": self.run_no_progress,
                "warningThreshold": self.run_no_progress_warning,
                "windowSize": self.run_no_progress_window,
            },
            "editUndo": {
                "enabled": self.edit_undo,
                "warningThreshold": self.edit_undo_warning,
                "criticalThreshold": self.edit_undo_critical,
            },
            "loopBudget": {"usd": self.loop_budget_usd},
        }


DEFAULT_OWN_RULES: Final = OwnRules()


def resolve_rules(rules: RawRules | None) -> OwnRules:
    """The resolved in-run rules of a validated (possibly merged, possibly absent) object."""
    if not rules:
        return DEFAULT_OWN_RULES
    usd = _value(rules, "loopBudget", "usd")
    return OwnRules(
        run_no_progress=bool(_value(rules, "runNoProgress", "enabled")),
        run_no_progress_warning=int(_value(rules, "runNoProgress", "warningThreshold")),
        run_no_progress_window=int(_value(rules, "runNoProgress", "windowSize")),
        edit_undo=bool(_value(rules, "editUndo", "enabled")),
        edit_undo_warning=int(_value(rules, "editUndo", "warningThreshold")),
        edit_undo_critical=int(_value(rules, "editUndo", "criticalThreshold")),
        loop_budget_usd=None if usd is None else float(usd),
    )
