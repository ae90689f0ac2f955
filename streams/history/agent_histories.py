"""Agent histories in a path (or in each runtime's default place) → events, the format found
from the content.

Rules:

* A folder is walked for ``.jsonl``, ``.json``, ``.ndjson``, ``.sqlite`` and ``.traj`` files
  (OpenClaw's pre-compaction copies and OpenHands' ``event_cache`` pages left out: they repeat
  events read elsewhere).
* Each file is read by the first reader that recognises its content: an OpenClaw SQLite store,
  an OpenClaw transcript (its session header), a Codex rollout (``session_meta`` first), a
  Gemini CLI chat (``sessionId`` and ``projectHash``), a Claude Code session (message entries
  with ``sessionId`` and ``uuid``), an OpenHands event (a file of an ``events`` folder, read
  with the other events of its folder), a SWE-agent trajectory (``trajectory`` steps), a
  mini-swe-agent trajectory (``messages``). A file none recognises is left to the caller (an
  events file, for ``replay``).
* Order: the events of OpenClaw files as each file gives them, file after file; the events of
  the other histories merged by time, each run's events kept in their order (a subagent's calls
  fall inside its parent's run, runs of different files interleave as they ran). A run id that
  a second file gives too (two trajectories of one task, by two models) is read as
  ``<id>~2`` there, and said.
* Without a path, each runtime's default place under the home folder is read, where it exists
  (:data:`DEFAULT_PLACES`).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TextIO

import msgspec

from loopwatch.detectors.events import Event
from loopwatch.streams.history.history_runs import json_document
from loopwatch.streams.history.openhands_events import is_openhands_event, read_openhands_events
from loopwatch.streams.inputs.compressed import content_suffix, open_input, read_input

__all__ = ["DEFAULT_PLACES", "Histories", "default_files", "history_files", "read_histories"]

_SUFFIXES = (".jsonl", ".json", ".ndjson", ".sqlite", ".traj")
_HEAD_LINES = 50

#: each runtime's default place: (folder under the home folder, the files' glob in it)
DEFAULT_PLACES: tuple[tuple[str, str], ...] = (
    (".openclaw/agents", "*/sessions/*.jsonl"),
    (".openclaw/agents", "*/agent/*.sqlite"),
    (".claude/projects", "**/*.jsonl"),
    (".codex/sessions", "**/rollout-*.jsonl"),
    (".gemini/tmp", "*/chats/**/*.json*"),
    (".openhands/sessions", "*/events/*.json"),
    (".openhands/conversations", "*/events/*.json"),
    (".config/mini-swe-agent", "*.traj.json"),
)


@dataclass
class Histories:
    """What a walk read: the events, how many histories gave them, the files no reader knew."""

    events: list[Event] = field(default_factory=list)
    read: int = 0
    others: list[Path] = field(default_factory=list)


def history_files(source: str) -> list[Path]:
    """The files of a source: the file itself, or the history files under a folder (sorted)."""
    from loopwatch.streams.history.transcripts import is_checkpoint_copy
    from loopwatch.streams.inputs.sources import InputError

    path = Path(source)
    if not path.is_dir():
        if not path.exists():
            raise InputError(f"no such file: {source}")
        return [path]
    files = sorted(
        p
        for p in path.rglob("*")
        if p.is_file()
        and content_suffix(p) in _SUFFIXES
        and not is_checkpoint_copy(p.name)
        and p.parent.name != "event_cache"
    )
    if not files:
        raise InputError(f"no .jsonl files in folder {source}")
    return files


def default_files(home: Path | None = None) -> list[Path]:
    """The history files in every runtime's default place that exists (sorted per place)."""
    home = home if home is not None else Path.home()
    found: list[Path] = []
    for folder, pattern in DEFAULT_PLACES:
        place = home / folder
        if place.is_dir():
            found += sorted(p for p in place.glob(pattern) if p.is_file() and p not in found)
    return found


def _head(path: Path) -> list[dict[str, Any]] | None:
    """The first JSONL objects of a file (at most 50), ``None`` when its first line is no JSON
    object (a JSON document over several lines, or not JSON)."""
    head: list[dict[str, Any]] = []
    with open_input(path) as stream:
        for raw in stream:
            if not raw.strip():
                continue
            entry = json_document(raw)
            if not isinstance(entry, dict):
                break
            head.append(entry)
            if len(head) == _HEAD_LINES:
                break
    return head or None


Reader = Callable[[Path, "str | None", TextIO], "list[Event]"]


def _jsonl_reader(path: Path, head: list[dict[str, Any]]) -> Reader | None:
    from loopwatch.streams.history import claude_code_sessions as claude
    from loopwatch.streams.history import codex_rollouts as codex
    from loopwatch.streams.history import gemini_chats as gemini

    if codex.is_codex_rollout(head):
        return codex.read_codex_rollout
    if gemini.is_gemini_chat_log(head):
        return gemini.read_gemini_chat
    if claude.is_claude_code_session(head):
        return claude.read_claude_code_session
    return None


def _document_reader(path: Path, document: Any) -> Reader | None:
    from loopwatch.streams.history import gemini_chats as gemini
    from loopwatch.streams.history import swe_agent_trajectories as swe

    if gemini.is_gemini_chat(document):
        return gemini.read_gemini_chat
    if swe.is_swe_agent_trajectory(document):
        return partial(_with_document, swe.read_swe_agent_trajectory, document)
    if swe.is_mini_swe_agent_trajectory(document):
        return partial(_with_document, swe.read_mini_swe_agent_trajectory, document)
    del path
    return None


def _with_document(
    read: Callable[[Path, Any, str | None, TextIO], list[Event]],
    document: Any,
    path: Path,
    agent_id: str | None,
    err: TextIO,
) -> list[Event]:
    return read(path, document, agent_id, err)


@dataclass
class _Walk:
    agent_id: str | None
    err: TextIO
    found: Histories = field(default_factory=Histories)
    runs: dict[str, list[Event]] = field(default_factory=dict)  # merged by time at the end
    openhands: dict[Path, list[Path]] = field(default_factory=dict)  # events folder -> its files

    def add(self, path: Path, events: list[Event]) -> None:
        """A file's events; a run id another file already gave (two trajectories of one task)
        is read as ``<id>~2`` (``~3``, ...), its event ids likewise, and said on ``err``."""
        renamed: dict[str, str] = {}
        mine = {str(event.run_id) for event in events}
        for run in sorted(mine):
            if run in self.runs:
                copy = 2
                while f"{run}~{copy}" in self.runs or f"{run}~{copy}" in mine:
                    copy += 1
                renamed[run] = f"{run}~{copy}"
                print(
                    f"loopwatch: {path}: run {run} is in another file too; read as {renamed[run]}",
                    file=self.err,
                )
        for event in events:
            run = str(event.run_id)
            if run in renamed:
                suffix = renamed[run][len(run) :]
                event = msgspec.structs.replace(event, run_id=renamed[run], event_id=event.event_id + suffix)
            self.runs.setdefault(str(event.run_id), []).append(event)

    def file(self, path: Path) -> None:
        from loopwatch.streams.history.transcripts import agent_from_path, is_transcript, read_transcript
        from loopwatch.streams.history.transcripts_sqlite import is_sqlite, read_sqlite_store

        if is_sqlite(path):  # OpenClaw 2026.8+: the agent's SQLite transcript store
            stored = read_sqlite_store(path, self.agent_id, self.err)
            self.found.events.extend(stored or ())
            self.found.read += stored is not None
            return
        with open_input(path) as stream:
            first = stream.readline()
        if is_transcript(first):
            agent = self.agent_id or agent_from_path(str(path)) or "main"
            self.found.events.extend(read_transcript(path, agent, self.err))
            self.found.read += 1
            return
        head = _head(path)
        if is_openhands_event(path, head):
            self.openhands.setdefault(path.parent, []).append(path)
            return
        reader = _jsonl_reader(path, head) if head is not None else None
        if reader is None and content_suffix(path) in (".json", ".traj"):
            reader = _document_reader(path, json_document(read_input(path)))
        if reader is None:
            self.found.others.append(path)
            return
        self.add(path, reader(path, self.agent_id, self.err))
        self.found.read += 1

    def finish(self) -> Histories:
        for folder, files in self.openhands.items():
            self.add(folder, read_openhands_events(folder, files, self.agent_id, self.err))
            self.found.read += 1
        merged: Iterator[Event] = heapq.merge(*self.runs.values(), key=lambda event: event.ts or 0)
        self.found.events.extend(merged)
        return self.found


def read_histories(files: list[Path], agent_id: str | None, err: TextIO) -> Histories:
    """The events of every history among ``files`` (see the module rules); skipped entries and
    unreadable stores are reported on ``err``."""
    walk = _Walk(agent_id, err)
    for path in files:
        walk.file(path)
    return walk.finish()
