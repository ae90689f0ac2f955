"""The embedded shell: the core over in-memory state, no broker (``run``, ``demo``)."""
