"""Claude Code session files (``~/.claude/projects/<project>/<sessionId>.jsonl``) → events.

Rules (besides :mod:`history_runs`'s):

* Runs: one per session, named by the entries' ``sessionId`` (the file's stem if none names it).
  A subagent's entries (``isSidechain: true``) are a run of their own, ``<sessionId>/<agentId>``,
  started by the session's run (depth 1): the ``agent-<agentId>.jsonl`` files Claude Code writes
  beside the session (2.0) or under ``<sessionId>/subagents/`` (2.1), each entry naming its
  ``agentId`` and the parent's ``sessionId``. Sidechain entries that name no agent (older
  releases kept them in the session's file) are grouped by the thread they start
  (``parentUuid: null``): ``<sessionId>/<uuid of its first entry>``.
* Calls: every ``tool_use`` block of an ``assistant`` entry: ``tool`` its ``name``, ``params``
  its ``input``, ``tool_call_id`` its ``id``, ``batch_id`` the model message's ``id`` (Claude
  Code writes each block of one message as an entry of its own). Server tools
  (``server_tool_use``, answered inside the model's own message) are not calls of the agent.
* Results: every ``tool_result`` block of a ``user`` entry, by ``tool_use_id``:
  ``is_error: true`` → ``error``, the text of its content; else ``result``, its content: a
  string as written, text blocks as their text joined by newlines (what the model reads),
  other blocks (an image) as written.
* A ``system`` entry with ``subtype: "compact_boundary"`` is a ``compaction_retry`` (the
  ``SessionStart`` hook with source ``compact`` gives the same event live).
* Event ids: ``<stem>-<tool_use id>`` for a call, ``<stem>-<tool_use id>.out`` for its result,
  ``<stem>-<uuid>`` for a compaction; ``run_end``: ``<stem>-<run's first entry uuid>.end``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TextIO

from loopwatch.detectors.events import Event
from loopwatch.streams.history.history_runs import (
    RunLog,
    Skips,
    checked,
    finish_runs,
    iso_ms,
    jsonl_entries,
    report,
    stem_of,
    text_of,
)
from loopwatch.streams.inputs.compressed import read_input

__all__ = ["AGENT", "is_claude_code_session", "read_claude_code_session", "session_events"]

AGENT = "claude-code"
_MESSAGE_TYPES = ("user", "assistant")


def is_claude_code_session(head: list[dict[str, Any]]) -> bool:
    """Whether the first entries of a JSONL file are a Claude Code session's: a ``user`` or
    ``assistant`` entry with ``sessionId``, ``uuid`` and a ``message``."""
    return any(
        entry.get("type") in _MESSAGE_TYPES
        and isinstance(entry.get("sessionId"), str)
        and isinstance(entry.get("uuid"), str)
        and isinstance(entry.get("message"), dict)
        for entry in head
    )


def _text_field(entry: dict[str, Any], name: str) -> str | None:
    value = entry.get(name)
    return value if isinstance(value, str) and value else None


class _Runs:
    """The runs of one file, by the entry that leads to each."""

    def __init__(self, stem: str) -> None:
        self.stem = stem
        self.runs: dict[str, RunLog] = {}
        self.threads: dict[str, str] = {}  # sidechain entry uuid -> its thread's first uuid

    def of(self, entry: dict[str, Any], line: int) -> RunLog:
        session = _text_field(entry, "sessionId") or self.stem
        uuid = _text_field(entry, "uuid") or f"L{line}"
        if entry.get("isSidechain") is not True:
            return self._run(session, None, uuid)
        agent = _text_field(entry, "agentId")
        if agent is None:
            parent = _text_field(entry, "parentUuid")
            agent = self.threads.get(parent, uuid) if parent is not None else uuid
            self.threads[uuid] = agent
        return self._run(f"{session}/{agent}", session, uuid)

    def _run(self, run_id: str, parent: str | None, uuid: str) -> RunLog:
        run = self.runs.get(run_id)
        if run is None:
            session = parent or run_id
            run = self.runs[run_id] = RunLog(run_id, session_id=session, parent=parent, end_key=f"{uuid}.end")
        return run


def _assistant(
    run: RunLog, message: dict[str, Any], at: int | None, where: str, uuid: str, skips: Skips
) -> None:
    content = message.get("content")
    batch = message.get("id") if isinstance(message.get("id"), str) else None
    for index, block in enumerate(content if isinstance(content, list) else [], start=1):
        if not isinstance(block, dict) or block.get("type") != "tool_use":
            continue
        name, call_id = block.get("name"), block.get("id")
        if not isinstance(name, str) or not name:
            skips.add(where, "a tool_use block without a name")
            continue
        call_id = call_id if isinstance(call_id, str) and call_id else None
        key = call_id or f"{uuid}.{index}"
        run.call(where, key, at, name, block.get("input", {}), call_id, batch)


def _as_read(content: Any) -> Any:
    """A result's content: blocks that are all text as their text (joined by newlines), as the
    model reads them; a string, or blocks with more than text (an image), as written."""
    if (
        isinstance(content, list)
        and content
        and all(
            isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str)
            for block in content
        )
    ):
        return "\n".join(block["text"] for block in content)
    return content


def _user(run: RunLog, message: dict[str, Any], at: int | None, where: str, skips: Skips) -> None:
    content = message.get("content")
    for _index, block in enumerate(content if isinstance(content, list) else [], start=1):
        if not isinstance(block, dict) or block.get("type") != "tool_result":
            continue
        call_id = block.get("tool_use_id")
        if not isinstance(call_id, str) or not call_id:
            skips.add(where, "a tool_result block without a tool_use_id")
            continue
        key = f"{call_id}.out"
        body = block.get("content", "")
        if block.get("is_error") is True:
            text = text_of(body)
            run.outcome(where, key, at, call_id, skips, error=text if text is not None else body)
        else:
            run.outcome(where, key, at, call_id, skips, result=_as_read(body))
    if not isinstance(content, list) and not isinstance(content, str):
        skips.add(where, f"a user message whose content is {type(content).__name__}")


def session_events(
    lines: list[bytes], path: str, stem: str, agent_id: str, skips: Skips
) -> list[tuple[str, Event]]:
    """``(where, event)`` of one session file (see the module rules)."""
    runs = _Runs(stem)
    for line, entry in jsonl_entries(lines, path, skips):
        kind = entry.get("type")
        if not isinstance(entry.get("sessionId"), str) and kind not in _MESSAGE_TYPES:
            continue  # file-history-snapshot, summary: no run's entries
        where = f"{path}:{line}"
        at = iso_ms(entry.get("timestamp"))
        uuid = entry["uuid"] if isinstance(entry.get("uuid"), str) and entry["uuid"] else f"L{line}"
        if kind in _MESSAGE_TYPES:
            message = entry.get("message")
            if not isinstance(message, dict):
                skips.add(where, f"a {kind} entry without a message")
                continue
            run = runs.of(entry, line)
            if kind == "assistant":
                _assistant(run, message, at, where, uuid, skips)
            else:
                _user(run, message, at, where, skips)
            run.saw(at)
        elif kind == "system" and entry.get("subtype") == "compact_boundary":
            runs.of(entry, line).compaction(where, uuid, at)
        elif kind in ("system", "progress", "attachment"):
            runs.of(entry, line).saw(at)
    return finish_runs(runs.runs.values(), stem, agent_id)


def read_claude_code_session(path: Path, agent_id: str | None, err: TextIO) -> list[Event]:
    """The events of a session file; each skipped entry is reported on ``err``."""
    skips = Skips()
    found = session_events(read_input(path).split(b"\n"), str(path), stem_of(path), agent_id or AGENT, skips)
    events = checked(found, skips)
    report(skips, err)
    return events
