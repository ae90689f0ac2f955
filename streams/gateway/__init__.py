"""Loop detection over HTTP, and the Claude Code hook that asks it."""

#: how long ``/v1/decide`` on the Kafka backend waits for the workers by default, then allows
DEFAULT_DECIDE_TIMEOUT_MS = 200
#: the longest it may be asked to wait: a runtime's hook waits seconds for its answer at most
MAX_DECIDE_TIMEOUT_MS = 60_000
