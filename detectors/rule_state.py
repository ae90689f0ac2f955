"""A rule's part of a run's state, stored in the run's snapshot under the rule's name.

Each rule that keeps state (:mod:`detectors.rules.base`) gives it as a :class:`RuleState`:
an object of its own that :meth:`RuleState.dump` turns into plain msgpack values (lists,
numbers, strings, bytes, ``None``) and its rule's ``load_state`` turns back. The run snapshot
holds ``[name, dumped]`` pairs; a name no registered rule claims (a rule of a newer or older
release) is kept as it was read (:class:`KeptState`), so a state passes through a worker that
does not know one of its rules unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mypy_extensions import mypyc_attr

__all__ = ["LOADERS", "KeptState", "RuleState", "load_rule_state"]


@mypyc_attr(allow_interpreted_subclasses=True)
class RuleState:
    """What one rule keeps for one run."""

    __slots__ = ()

    def dump(self) -> Any:
        """The state as plain msgpack values."""
        raise NotImplementedError


class KeptState(RuleState):
    """The stored state of a rule this process does not have: kept as read."""

    __slots__ = ("raw",)

    def __init__(self, raw: Any) -> None:
        self.raw = raw

    def dump(self) -> Any:
        return self.raw


#: rule name -> how its stored state is read back (filled by :mod:`detectors.rules.registry`)
LOADERS: dict[str, Callable[[Any], RuleState]] = {}


def load_rule_state(name: str, raw: Any) -> RuleState:
    """A rule's state from its stored form (kept as read for a rule not registered here)."""
    load = LOADERS.get(name)
    return load(raw) if load is not None else KeptState(raw)
