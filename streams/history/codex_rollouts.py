"""Codex CLI rollouts (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``) → events.

Rules (besides :mod:`history_runs`'s):

* A rollout starts with a ``session_meta`` line; every line is ``{timestamp, type, payload}``.
* Runs: one per rollout, named by the session's ``id`` (the thread id). A subagent's rollout
  (``source: {"subagent": {"thread_spawn": {parent_thread_id, depth}}}``) is started by its
  parent thread's run, at its depth.
* Calls: the ``response_item``\\ s ``function_call`` (``tool`` its ``name``, ``params`` its
  ``arguments`` decoded from their JSON text), ``custom_tool_call`` (``params``
  ``{"input": <its text>}``: ``apply_patch``'s patch) and ``local_shell_call`` (``tool``
  ``local_shell``, ``params`` its ``action``), each with its ``call_id``. A ``web_search_call``
  runs on the model's side, not the agent's: no call.
* Results: ``function_call_output`` and ``custom_tool_call_output`` by ``call_id``, their
  ``output`` as written (text, or content items). The output itself does not say whether the
  call failed; the rollout marks it elsewhere, and a failed call's output is its ``error``:
  an ``item_completed`` event (Codex 0.17x) whose item (``CommandExecution``, ``FileChange``,
  ``McpToolCall``, ..., its ``id`` the call id) has ``status: "failed"`` or ``"declined"``,
  an ``exec_command_end`` event with ``status: "failed"`` (or, without a status, a non-zero
  ``exit_code``), a ``patch_apply_end`` with ``success: false``, an ``mcp_tool_call_end``
  whose result is an ``Err`` or ``isError``, an output ``{"content", "success": false}``, or an
  output whose JSON text is ``{"output", "metadata": {"exit_code": non-zero}}`` (older shell
  and ``apply_patch`` outputs). A command of unified exec (``exec_command``) whose output says
  it is still running ends in a later ``write_stdin`` output: the failure is that output's,
  the one that says the process exited (the model reads the failure there).
* A ``compacted`` line is a ``compaction_retry`` (Codex's ``PostCompact`` hook gives the same
  event live).
* Event ids: ``<stem>-<call_id>`` for a call, ``<stem>-<call_id>.out`` for its result,
  ``<stem>-L<line>`` for a compaction.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from loopwatch.detectors.events import Event
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
)
from loopwatch.streams.inputs.compressed import read_input

__all__ = ["AGENT", "is_codex_rollout", "read_codex_rollout", "rollout_events"]

AGENT = "codex"
_OUTPUTS = ("function_call_output", "custom_tool_call_output", "local_shell_call_output")
#: an ``item_completed`` item's status when its call did not succeed (it failed, or was refused)
_FAILED_ITEMS = ("failed", "declined")


def is_codex_rollout(head: list[dict[str, Any]]) -> bool:
    """Whether a JSONL file starts as a Codex rollout: a ``session_meta`` line with an id."""
    first = head[0] if head else {}
    payload = first.get("payload")
    return (
        first.get("type") == "session_meta"
        and isinstance(payload, dict)
        and isinstance(payload.get("id"), str)
    )


def _chain(meta: dict[str, Any]) -> tuple[str | None, int | None]:
    source = meta.get("source")
    spawn = source.get("subagent") if isinstance(source, dict) else None
    spawn = spawn.get("thread_spawn") if isinstance(spawn, dict) else None
    if not isinstance(spawn, dict) or not isinstance(spawn.get("parent_thread_id"), str):
        return None, None
    depth = spawn.get("depth")
    return spawn["parent_thread_id"], depth if isinstance(depth, int) and not isinstance(depth, bool) else 1


#: unified exec's outputs (``exec_command``, ``write_stdin``): the process still runs, or ended
_RUNNING = re.compile(r"^Process running with session ID (\d+)$", re.MULTILINE)
_EXITED = re.compile(r"^Process exited with code -?\d+$", re.MULTILINE)


@dataclass
class _Failures:
    """What the rollout's end events mark as failed: call ids, and unified exec's processes."""

    calls: set[str] = field(default_factory=set)
    processes: set[str] = field(default_factory=set)

    def output_failed(self, call_id: str, params: Any, output: Any) -> bool:
        """Whether the output of ``call_id`` reports a failure: the failed call's own output, or
        (unified exec) the output that reports its process's end, a ``write_stdin`` one when the
        command's own output said it was still running."""
        text = output if isinstance(output, str) else ""
        if call_id in self.calls:
            return _RUNNING.search(text) is None
        session = params.get("session_id") if isinstance(params, dict) else None
        return session is not None and str(session) in self.processes and _EXITED.search(text) is not None


def _failed_calls(entries: list[tuple[int, dict[str, Any]]]) -> _Failures:
    """The calls and processes the rollout's events mark as failed."""
    failed = _Failures()
    for _, entry in entries:
        payload = entry.get("payload")
        if entry.get("type") != "event_msg" or not isinstance(payload, dict):
            continue
        kind, call_id = payload.get("type"), payload.get("call_id")
        item = payload.get("item")
        if kind == "item_completed" and isinstance(item, dict) and isinstance(item.get("id"), str):
            if item.get("status") in _FAILED_ITEMS:  # Codex 0.17x: the call's item, completed
                failed.calls.add(item["id"])
                if item.get("process_id") is not None:
                    failed.processes.add(str(item["process_id"]))
            continue
        if not isinstance(call_id, str):
            continue
        if kind == "exec_command_end":
            status, code = payload.get("status"), payload.get("exit_code")
            if status == "failed" or (status is None and isinstance(code, int) and code != 0):
                failed.calls.add(call_id)
                if payload.get("process_id") is not None:
                    failed.processes.add(str(payload["process_id"]))
        elif kind == "patch_apply_end" and payload.get("success") is False:
            failed.calls.add(call_id)
        elif kind == "mcp_tool_call_end":
            result = payload.get("result")
            ok = result.get("Ok") if isinstance(result, dict) else None
            if isinstance(result, dict) and (
                "Err" in result or (isinstance(ok, dict) and ok.get("isError") is True)
            ):
                failed.calls.add(call_id)
    return failed


def _arguments(text: object) -> Any:
    if not isinstance(text, str):
        return text if text is not None else {}
    decoded = json_document(text.encode("utf-8", "surrogatepass"))
    return decoded if decoded is not None else text


def _output(output: Any) -> tuple[Any, bool]:
    """The output as the model read it, and whether it says the call failed."""
    if isinstance(output, dict) and "content" in output:
        return output["content"], output.get("success") is False
    if isinstance(output, str) and output.startswith("{"):
        decoded = json_document(output.encode("utf-8", "surrogatepass"))
        metadata = decoded.get("metadata") if isinstance(decoded, dict) else None
        code = metadata.get("exit_code") if isinstance(metadata, dict) else None
        return output, isinstance(code, int) and not isinstance(code, bool) and code != 0
    return output, False


def _item(
    run: RunLog, item: dict[str, Any], at: int | None, where: str, failed: _Failures, skips: Skips
) -> None:
    kind = item.get("type")
    call_id = item.get("call_id") if isinstance(item.get("call_id"), str) and item.get("call_id") else None
    if kind in ("function_call", "custom_tool_call", "local_shell_call"):
        name = item.get("name") if kind != "local_shell_call" else "local_shell"
        if not isinstance(name, str) or not name:
            skips.add(where, f"a {kind} without a name")
            return
        if kind == "function_call":
            params = _arguments(item.get("arguments"))
        elif kind == "custom_tool_call":
            params = {"input": item.get("input")}
        else:
            params = item.get("action", {})
            call_id = call_id or (item.get("id") if isinstance(item.get("id"), str) else None)
        run.call(where, call_id or "L" + where.rsplit(":", 1)[-1], at, name, params, call_id)
    elif kind in _OUTPUTS:
        if call_id is None:
            skips.add(where, f"a {kind} without a call_id")
            return
        output, failing = _output(item.get("output"))
        params = run.calls.get(call_id, ("", None))[1]
        if failing or failed.output_failed(call_id, params, output):
            run.outcome(where, f"{call_id}.out", at, call_id, skips, error=output)
        else:
            run.outcome(where, f"{call_id}.out", at, call_id, skips, result=output)


def rollout_events(
    lines: list[bytes], path: str, stem: str, agent_id: str, skips: Skips
) -> list[tuple[str, Event]]:
    """``(where, event)`` of one rollout (see the module rules)."""
    entries = jsonl_entries(lines, path, skips)
    if not entries or not is_codex_rollout([entries[0][1]]):
        return []
    meta = entries[0][1]["payload"]
    parent, depth = _chain(meta)
    run = RunLog(str(meta["id"]), session_id=str(meta["id"]), parent=parent, depth=depth, end_key="end")
    failed = _failed_calls(entries)
    for line, entry in entries:
        at = iso_ms(entry.get("timestamp"))
        where = f"{path}:{line}"
        payload = entry.get("payload")
        kind = entry.get("type")
        if kind == "response_item" and isinstance(payload, dict):
            _item(run, payload, at, where, failed, skips)
        elif kind == "compacted":
            run.compaction(where, f"L{line}", at)
        elif kind in ("response_item", "event_msg", "turn_context") and not isinstance(payload, dict):
            skips.add(where, f"a {kind} line without a payload object")
        run.saw(at)
    return finish_runs([run], stem, agent_id)


def read_codex_rollout(path: Path, agent_id: str | None, err: TextIO) -> list[Event]:
    """The events of a rollout file; each skipped line is reported on ``err``."""
    skips = Skips()
    found = rollout_events(read_input(path).split(b"\n"), str(path), stem_of(path), agent_id or AGENT, skips)
    events = checked(found, skips)
    report(skips, err)
    return events
