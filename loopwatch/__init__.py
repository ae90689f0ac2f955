"""loopwatch: stop AI agents stuck in tool-call loops, fleet-wide.

The import namespace of the three folders at the top of the repository, which stay where they
are (this folder links to them):

- ``loopwatch.config``: the configuration model (pure);
- ``loopwatch.detectors``: the detector core and the fleet rules (pure: no I/O, no clock);
- ``loopwatch.streams``: the shells around the core (Kafka worker, embedded runtime, gateway,
  history, fleet view) and the command line on top.

The in-process API::

    from loopwatch import Decision, FleetConfig, InvalidEvent, LoopDetector, ProposedCall

Its names are imported when first asked for (PEP 562), not with the package: ``loopwatch
hook`` and ``loopwatch --help`` start without the core or the config model.
"""

from __future__ import annotations

TYPE_CHECKING = False  # (typing itself is not imported for it)
if TYPE_CHECKING:
    from loopwatch.config.fleet import FleetConfig
    from loopwatch.detectors.events import InvalidEvent
    from loopwatch.detectors.facade import BatchDecision, Decision, LoopDetector, ProposedCall

__all__ = [
    "BatchDecision",
    "Decision",
    "FleetConfig",
    "InvalidEvent",
    "LoopDetector",
    "ProposedCall",
    "__version__",
]

__version__ = "0.2.0"

#: each name of the API → the module that defines it
_HOMES = {
    "FleetConfig": "loopwatch.config.fleet",
    "InvalidEvent": "loopwatch.detectors.events",
    "BatchDecision": "loopwatch.detectors.facade",
    "Decision": "loopwatch.detectors.facade",
    "LoopDetector": "loopwatch.detectors.facade",
    "ProposedCall": "loopwatch.detectors.facade",
}


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'loopwatch' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # asked once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})
