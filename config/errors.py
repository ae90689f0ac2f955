"""Configuration errors.

Hierarchy::

    LoopwatchError                  (detectors.errors; root of every loopwatch error)
    └── ConfigError                 invalid configuration; carries every problem found
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ConfigError", "ConfigProblem", "LoopwatchError"]


class LoopwatchError(Exception):
    """Root of every error loopwatch raises on purpose."""


@dataclass(frozen=True, slots=True)
class ConfigProblem:
    """One problem in a configuration, with the dotted path where it was found."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class ConfigError(LoopwatchError):
    """Invalid configuration. ``problems`` lists every problem, not just the first."""

    def __init__(self, problems: list[ConfigProblem], source: str | None = None) -> None:
        self.problems = list(problems)
        self.source = source
        where = f" in {source}" if source else ""
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"invalid configuration{where} ({len(self.problems)} problem(s)):\n{lines}")
