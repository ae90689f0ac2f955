"""Loop detection over HTTP, and the Claude Code hook that asks it."""
