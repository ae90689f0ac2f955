"""Fleet-wide rules (spec BEYOND-OPENCLAW F1, F2): pure aggregators over the whole fleet's events.

* :mod:`detectors.fleet.facts` — what an event or a verdict tells the fleet rules, and the
  subject (tool or agent) that aggregates it.
* :mod:`detectors.fleet.tool_outage` — F1, per tool: outage, recovery and fail-fast blocks.
* :mod:`detectors.fleet.systemic_loop` — F2, per agent: the same loop in many runs.
* :mod:`detectors.fleet.alerts` — the ``fleet_alert`` record.
* :mod:`detectors.fleet.watch` — all subjects at once, for the embedded runtime, ``run``,
  ``replay`` and the demo; the Kafka worker keeps the same per-subject states in its table.
"""
