"""Gemini CLI chats (``~/.gemini/tmp/<project>/chats/session-*.json`` and ``.jsonl``) → events.

Rules (besides :mod:`history_runs`'s):

* A chat is a JSON document ``{sessionId, projectHash, startTime, messages: [...]}`` (up to
  0.6x), or a JSONL log (later releases): a metadata line (``sessionId``, ``projectHash``),
  then message records, each written again whole when it changes (the last write of an ``id``
  counts, at the place of its first), ``{"$set": {...}}`` metadata updates (a ``messages``
  list among them updates those messages) and ``{"$rewindTo": id}``. A rewind takes messages
  out of the conversation, not the calls that ran: they are kept.
* Runs: one per chat, named by its ``sessionId``. A subagent's chat (``kind: "subagent"``,
  written to ``chats/<parent sessionId>/``) is started by its parent's run.
* Calls: the ``toolCalls`` of each ``gemini`` message, in order: ``tool`` the ``name``,
  ``params`` the ``args``, ``tool_call_id`` the ``id``. Gemini CLI records a turn's calls
  together, when they are done, and adds the calls of the turns that follow to the same message
  until the model says something: the calls recorded at one time are a turn, ``batch_id`` the
  message's ``id`` (``<id>.<n>`` for its n-th turn when it holds several), its calls before
  their results, as Gemini runs them.
* Results, by ``status``: ``success`` → ``result``, the ``output`` of its ``functionResponse``
  (the response itself if it has none); ``error`` and ``cancelled`` → ``error``, the
  response's ``error`` (else its output); other statuses (still running when the chat was
  saved) give no result. ``run_shell_command``'s output loses its closing process-id lines
  (``Background PIDs``, ``Process Group PGID``), as the ``AfterTool`` hook does, or no two runs
  of one failing command would have the same outcome.
* Times: a call's and its result's from the call's ``timestamp`` (when it was recorded, done:
  the chat records no other).
* Event ids: ``<stem>-<call id>`` for a call, ``<stem>-<call id>.out`` for its result.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TextIO

from loopwatch.detectors.events import Event
from loopwatch.streams.gateway.hooks.gemini import SHELL_TOOL, without_process_ids
from loopwatch.streams.history.history_runs import (
    RunLog,
    Skips,
    checked,
    finish_runs,
    iso_ms,
    json_document,
    jsonl_entries,
    report,
    stem_of,
    text_of,
)
from loopwatch.streams.inputs.compressed import read_input

__all__ = ["AGENT", "chat_events", "is_gemini_chat", "is_gemini_chat_log", "read_gemini_chat"]

AGENT = "gemini"
_ERRORS = ("error", "cancelled")


def _is_metadata(record: object) -> bool:
    return (
        isinstance(record, dict)
        and isinstance(record.get("sessionId"), str)
        and isinstance(record.get("projectHash"), str)
    )


def is_gemini_chat(document: Any) -> bool:
    """Whether a JSON document is a Gemini CLI chat (its ``messages`` and session metadata)."""
    return _is_metadata(document) and isinstance(document.get("messages"), list)


def is_gemini_chat_log(head: list[dict[str, Any]]) -> bool:
    """Whether a JSONL file starts as a Gemini CLI chat log (a metadata line first)."""
    return bool(head) and _is_metadata(head[0]) and "messages" not in head[0]


def _log_messages(
    entries: list[tuple[int, dict[str, Any]]], path: str, skips: Skips
) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]:
    """The metadata and the ``(where, message)`` of a JSONL chat, each message as last written."""
    metadata: dict[str, Any] = {}
    messages: dict[str, tuple[str, dict[str, Any]]] = {}
    for line, record in entries:
        where = f"{path}:{line}"
        if isinstance(record.get("$rewindTo"), str):
            continue  # the calls ran: kept
        if isinstance(record.get("$set"), dict):
            update = record["$set"]
            for message in update.get("messages") or []:
                if isinstance(message, dict) and isinstance(message.get("id"), str):
                    messages[message["id"]] = (messages.get(message["id"], (where,))[0], message)
            metadata.update({k: v for k, v in update.items() if k != "messages"})
        elif isinstance(record.get("id"), str):
            messages[record["id"]] = (messages.get(record["id"], (where,))[0], record)
        elif _is_metadata(record):
            metadata.update(record)
        else:
            skips.add(where, "neither a message, a metadata record, $set nor $rewindTo")
    return metadata, list(messages.values())


def _response(call: dict[str, Any]) -> dict[str, Any] | None:
    """The ``functionResponse.response`` of the call's result parts (its own id's first)."""
    parts = call.get("result")
    found = None
    for part in parts if isinstance(parts, list) else [parts]:
        reply = part.get("functionResponse") if isinstance(part, dict) else None
        if isinstance(reply, dict) and isinstance(reply.get("response"), dict):
            if reply.get("id") == call.get("id"):
                return dict(reply["response"])
            found = found or dict(reply["response"])
    return found


def _message(run: RunLog, message: dict[str, Any], where: str, skips: Skips) -> None:
    calls = message.get("toolCalls")
    if message.get("type") != "gemini" or not isinstance(calls, list):
        return
    batch = message.get("id") if isinstance(message.get("id"), str) else None
    turns: list[list[tuple[str, dict[str, Any]]]] = []  # runs of calls recorded together
    for index, call in enumerate(calls):
        here = f"{where}:toolCalls[{index}]"
        if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not call["name"]:
            skips.add(here, "a tool call without a name")
            continue
        if not turns or turns[-1][0][1].get("timestamp") != call.get("timestamp"):
            turns.append([])
        turns[-1].append((here, call))
    for number, turn in enumerate(turns, start=1):
        batch_id = batch if batch is None or len(turns) == 1 else f"{batch}.{number}"
        answered: list[tuple[str, str, int | None, str | None, dict[str, Any]]] = []
        for here, call in turn:
            call_id = call.get("id") if isinstance(call.get("id"), str) and call.get("id") else None
            key = call_id or f"{batch}.{len(answered) + 1}"
            at = iso_ms(call.get("timestamp")) or iso_ms(message.get("timestamp"))
            args = call.get("args")
            run.call(here, key, at, call["name"], args if args is not None else {}, call_id, batch_id)
            answered.append((here, key, at, call_id, call))
        for here, key, at, call_id, call in answered:
            _outcome(run, call, here, key, at, call_id, skips)


def _outcome(
    run: RunLog, call: dict[str, Any], here: str, key: str, at: int | None, call_id: str | None, skips: Skips
) -> None:
    status = call.get("status")
    if status != "success" and status not in _ERRORS:
        return
    response = _response(call)
    output = response.get("output") if response is not None else None
    if isinstance(output, str) and call["name"] == SHELL_TOOL:
        output = without_process_ids(output)
    if status == "success":
        run.outcome(here, f"{key}.out", at, call_id, skips, result=output if output is not None else response)
        return
    error = response.get("error") if response is not None else None
    if isinstance(error, dict):
        error = error.get("message") or error.get("type") or "tool call failed"
    if error is None:
        error = output if output is not None else text_of(call.get("resultDisplay")) or f"tool call {status}"
    run.outcome(here, f"{key}.out", at, call_id, skips, error=error)


def chat_events(
    document: Any, lines: list[bytes] | None, path: Path, agent_id: str, skips: Skips
) -> list[tuple[str, Event]]:
    """``(where, event)`` of a chat: its JSON ``document``, or the ``lines`` of its JSONL log."""
    label = str(path)
    if lines is not None:
        metadata, messages = _log_messages(jsonl_entries(lines, label, skips), label, skips)
    else:
        metadata = document
        messages = [(f"{label}:messages[{i}]", m) for i, m in enumerate(document["messages"])]
    if not _is_metadata(metadata):
        return []
    session = str(metadata["sessionId"])
    parent = path.parent.name if metadata.get("kind") == "subagent" and path.parent.name != "chats" else None
    run = RunLog(session, session_id=parent or session, parent=parent, end_key="end")
    for where, message in messages:
        if not isinstance(message, dict):
            skips.add(where, f"a message that is {type(message).__name__}, not an object")
            continue
        _message(run, message, where, skips)
        run.saw(iso_ms(message.get("timestamp")))
    run.saw(iso_ms(metadata.get("lastUpdated")) if run.events else None)
    return finish_runs([run], stem_of(path), agent_id)


def read_gemini_chat(path: Path, agent_id: str | None, err: TextIO) -> list[Event]:
    """The events of a chat file (JSON or JSONL); each skipped entry is reported on ``err``."""
    skips = Skips()
    data = read_input(path)
    document = json_document(data)
    if is_gemini_chat(document):
        found = chat_events(document, None, path, agent_id or AGENT, skips)
    else:
        found = chat_events(None, data.split(b"\n"), path, agent_id or AGENT, skips)
    events = checked(found, skips)
    report(skips, err)
    return events
