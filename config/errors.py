"""Configuration errors.

Hierarchy::

    LoopwatchError                  (detectors.errors; root of every loopwatch error)
    └── ConfigError                 invalid configuration; carries every problem found
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

__all__ = ["ConfigError", "ConfigProblem", "LoopwatchError", "both_or_every_problem"]

A = TypeVar("A")
B = TypeVar("B")


class LoopwatchError(Exception):
    """Root of every error loopwatch raises on purpose."""


@dataclass(frozen=True, slots=True)
class ConfigProblem:
    """One problem in a configuration, with the dotted path where it was found."""

    path: str
    message: str

    def __str__(self) -> str:
        if not self.path:
            return self.message
        # OpenClaw's ordering messages name the key themselves ("tools.loopDetection.warningThreshold
        # must be lower than ..."): after the path, the key is not repeated
        prefix = f"tools.loopDetection.{self.path.rsplit('.', 1)[-1]} "
        message = self.message.removeprefix(prefix) if self.message.startswith(prefix) else self.message
        return f"{self.path}: {message}"


class ConfigError(LoopwatchError):
    """Invalid configuration. ``problems`` lists every problem, not just the first."""

    def __init__(self, problems: list[ConfigProblem], source: str | None = None) -> None:
        self.problems = list(problems)
        self.source = source
        where = f" in {source}" if source else ""
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"invalid configuration{where} ({len(self.problems)} problem(s)):\n{lines}")


def _under(source: str | None, path: str) -> str:
    """A problem's path under its source (``file.json: tools.x``; the source alone for a
    problem of the whole source)."""
    if not source:
        return path
    return f"{source}: {path}" if path else source


def both_or_every_problem(first: Callable[[], A], second: Callable[[], B]) -> tuple[A, B]:
    """Two configurations loaded (e.g. the ``LOOPWATCH_*`` settings and the config file), or one
    :class:`ConfigError` with the problems of both, each under its source: an operator fixes
    them in one go, not one source per start."""
    errors: list[ConfigError] = []
    try:
        a = first()
    except ConfigError as exc:
        errors.append(exc)
    try:
        b = second()
    except ConfigError as exc:
        errors.append(exc)
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise ConfigError(
            [
                ConfigProblem(_under(error.source, problem.path), problem.message)
                for error in errors
                for problem in error.problems
            ]
        )
    return a, b
