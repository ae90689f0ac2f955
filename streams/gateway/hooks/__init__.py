"""Agent runtimes' hooks, answered in each runtime's own terms.

A runtime's hook input becomes a :class:`~streams.gateway.hooks.plan.HookPlan` (pure): the
events to record, the proposed call to decide, and how the decision is answered in the
runtime's hook output format. The plan runs either in a command hook (``loopwatch hook
RUNTIME``, one process per hook call, over HTTP: :mod:`.command`) or inside the gateway
(``POST /v1/hooks/RUNTIME``, the runtime's HTTP hooks: no process per tool call).
"""
