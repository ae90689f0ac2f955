"""Differential tests: loopwatch's core against OpenClaw's shipped detector (issue 22 §4).

* ``openclaw_oracle.mjs``: the Node driver around the installed ``openclaw`` package.
* :mod:`tests.differential.oracle`: starts it (one process for a whole fleet) and talks NDJSON.
* :mod:`tests.differential.fleet`: seeded random fleets of runs in every loop shape.
* :mod:`tests.differential.compare`: drives a fleet through both sides and compares call by
  call; shrinks a mismatching run to its smallest failing form.
"""
