"""loopwatch: stop AI agents stuck in tool-call loops, fleet-wide.

The import namespace of the three folders at the top of the repository, which stay where they
are (this folder links to them):

- ``loopwatch.config``: the configuration model (pure);
- ``loopwatch.detectors``: the detector core and the fleet rules (pure: no I/O, no clock);
- ``loopwatch.streams``: the shells around the core (Kafka worker, embedded runtime, gateway,
  history, fleet view) and the command line on top.

The in-process API::

    from loopwatch import Decision, FleetConfig, InvalidEvent, LoopDetector, ProposedCall
"""

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
