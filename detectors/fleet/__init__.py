"""Fleet-wide rules (spec BEYOND-OPENCLAW F1, F2, F6b, F6c): pure aggregators over the whole
fleet's events.

* :mod:`detectors.fleet.facts` — what an event or a verdict tells the fleet rules, and the
  subject (tool, agent or delegation chain) that aggregates it.
* :mod:`detectors.fleet.tool_outage` — F1, per tool: outage, recovery and fail-fast blocks.
* :mod:`detectors.fleet.systemic_loop` — F2, per agent: the same loop in many runs.
  Its counts past its caps are HyperLogLog sketches (:mod:`detectors.fleet.cardinality`).
* :mod:`detectors.fleet.chains` — F6, per delegation chain (keyed by its root): its state and
  expiry; :mod:`detectors.fleet.chain_runaway` (F6b, a chain that keeps starting runs) and
  :mod:`detectors.fleet.chain_repeat` (F6c, its runs repeating each other's work);
  :mod:`detectors.fleet.chain_blocks`, their optional blocks, answered from the alerts.
* :mod:`detectors.fleet.alerts` — the ``fleet_alert`` record.
* :mod:`detectors.fleet.watch` — all subjects at once, for the embedded runtime, ``run``,
  ``replay`` and the demo; the Kafka worker keeps the same per-subject states in its table.
"""
