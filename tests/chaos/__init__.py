"""Fault scenarios on the real broker: ``make chaos`` and ``tests/integration/test_faults.py``."""
