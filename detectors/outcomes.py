"""Outcome hashing: which tool results count as "the same outcome" (spec §3.3–3.6).

``hash_outcome`` evaluates the rules of §3.3 top to bottom; the first that returns decides.
Its output is an :data:`OutcomeHash` ``(result_hash, unknown_tool_name, kind, no_progress,
failure_id)``. Under revision 2026-05 only the first two are ever set, and ``result_hash is
None`` means the outcome is not recorded at all (no result, or the detector's own loop veto).

Revision 2026-08 (docs/rules-2026-08.md) classifies further:

* a thrown error is flagged ``no_progress``;
* the detector's own loop veto has no hash but the kind :data:`VETO` (it is recorded);
* a finished ``exec`` that failed for real has the kind :data:`TERMINAL_EXEC_FAILURE` and a
  ``failure_id`` that ignores drifting timestamps, durations, counters and pids (its result
  hash is unchanged);
* a ``write`` with ``details.changed === false`` hashes as ``{"status": "unchanged"}`` (the
  text echoing the path is ignored) and is flagged ``no_progress``.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any, Final

from msgspec import Raw

from loopwatch.config.settings import Revision
from loopwatch.detectors import raw_json
from loopwatch.detectors.exec_failures import failure_shape, terminal_exit_code
from loopwatch.detectors.hashing import _JS_WHITESPACE, Digester, content_text, js_trim, update_plan_shape
from loopwatch.detectors.stable_json import UNDEFINED, JSNumber, js_number_text, plain, stable_stringify
from loopwatch.detectors.values import MISSING, ErrorMessage

__all__ = [
    "MISSING",
    "NO_OUTCOME",
    "SEND_ACTIONS",
    "TERMINAL_EXEC_FAILURE",
    "VETO",
    "ErrorMessage",
    "OutcomeHash",
    "content_text",
    "error_text",
    "extract_unknown_tool_name",
    "hash_outcome",
    "is_known_poll",
    "is_send_result",
    "strip_volatile_send_ids",
]


#: Outcome kinds (revision 2026-08): the detector's own loop veto, a terminal exec failure.
VETO: Final = "tool-loop-veto"
TERMINAL_EXEC_FAILURE: Final = "terminal-exec-failure"

#: ``(result_hash, unknown_tool_name, kind, no_progress, failure_id)``
OutcomeHash = tuple[str | None, str | None, str | None, bool, str | None]
NO_OUTCOME: Final[OutcomeHash] = (None, None, None, False, None)

SEND_ACTIONS: Final = frozenset(
    {
        "send",
        "broadcast",
        "reply",
        "thread-reply",
        "sendWithEffect",
        "sendAttachment",
        "upload-file",
        "sticker",
        "poll",
    }
)
_VOLATILE_KEYS: Final = frozenset(
    {
        "messageId",
        "message_id",
        "messageIds",
        "platformMessageId",
        "platformMessageIds",
        "fileId",
        "file_id",
        "fileKey",
        "pollId",
        "poll_id",
        "receipt",
        "runId",
        "idempotencyKey",
        "ts",
        "timestamp",
        "sentAt",
        "deliveredAt",
        "createdAt",
    }
)
#: compiled, a module's own Final name is a C static (the imported one, a dict lookup per use)
_NOTHING: Final = MISSING
#: the outcome of a no-op ``write`` (revision 2026-08)
_UNCHANGED: Final = {"status": "unchanged"}
#: OpenClaw's patterns are non-unicode JavaScript regexes: their white space is JavaScript's
#: (U+FEFF is one; \x1c-\x1f and U+0085 are not) and their case folding ASCII only (İ, ſ and
#: the Kelvin sign are no letters of [a-z]): ``re.ASCII`` with JavaScript's white space.
_JS_SPACE: Final = re.escape(_JS_WHITESPACE)
_UNKNOWN_TOOL: Final = (
    re.compile(rf"unknown tool[:{_JS_SPACE}]+[\"']?([a-z0-9_.-]+)[\"']?", re.ASCII | re.IGNORECASE),
    re.compile(
        rf"tool[{_JS_SPACE}]+[\"']?([a-z0-9_.-]+)[\"']?[{_JS_SPACE}]+(?:not found|is not available)",
        re.ASCII | re.IGNORECASE,
    ),
)


def _is_number(value: object) -> bool:
    return (isinstance(value, (int, float, JSNumber))) and not isinstance(value, bool)


def error_text(error: Any) -> str:
    """The text OpenClaw hashes for a thrown value (``formatErrorForHash``)."""
    if isinstance(error, ErrorMessage):
        return str(error) or "Error"
    if isinstance(error, str):
        return error
    if isinstance(error, bool):
        return "true" if error else "false"
    if isinstance(error, int):
        return str(error)
    if isinstance(error, float):
        return js_number_text(error)
    if isinstance(error, JSNumber):
        return js_number_text(error.value)
    if isinstance(error, BaseException):
        return str(error) or type(error).__name__
    return stable_stringify(error)


def extract_unknown_tool_name(text: str) -> str | None:
    """The missing tool's name in an error text, lower-cased (spec §3.5)."""
    raw = js_trim(text)
    if not raw:
        return None
    for pattern in _UNKNOWN_TOOL:
        match = pattern.search(raw)
        if match:
            return js_trim(match.group(1)).lower() or None
    return None


def is_known_poll(tool: str, params: Any) -> bool:
    """``command_status``, or ``process`` with action ``poll``/``log`` (spec §3.6)."""
    if tool == "command_status":
        return True
    if tool != "process":
        return False
    params = plain(params)
    return isinstance(params, dict) and params.get("action") in ("poll", "log")


def is_send_result(tool: str, params: Any, send_tools: Collection[str]) -> bool:
    """Whether a result is a delivery receipt whose volatile ids are stripped (spec §3.4)."""
    if tool == "sessions_send":
        return True
    if tool == "message":
        params = plain(params)
        action = params.get("action") if isinstance(params, dict) else None
        return isinstance(action, str) and action in SEND_ACTIONS
    return tool in send_tools


def _looks_like_message(obj: dict[str, Any]) -> bool:
    if not (isinstance(obj.get("id"), str) and isinstance(obj.get("text"), str)):
        return False
    return (
        isinstance(obj.get("direction"), str)
        or isinstance(obj.get("senderId"), str)
        or isinstance(obj.get("accountId"), str)
        or isinstance(obj.get("conversation"), dict)
    )


def strip_volatile_send_ids(value: Any) -> Any:
    """``details`` without per-send ids and timestamps, at every depth (spec §3.4)."""
    if isinstance(value, list):
        return [strip_volatile_send_ids(item) for item in value]
    if isinstance(value, dict):
        drop_id = _looks_like_message(value)
        return {
            key: strip_volatile_send_ids(item)
            for key, item in value.items()
            if key not in _VOLATILE_KEYS and not (drop_id and key == "id")
        }
    return value


def _exec_fingerprint(details: dict[str, Any], status: str, text: str) -> dict[str, Any] | None:
    if status == "running":
        tail = details.get("tail")
        return {"status": status, "tail": tail if isinstance(tail, str) else ""}
    if status in ("completed", "failed"):
        exit_code = details.get("exitCode")
        aggregated = details.get("aggregated")
        output = js_trim(aggregated) if isinstance(aggregated, str) else ""
        return {
            "status": status,
            "exitCode": exit_code if _is_number(exit_code) else None,
            "timedOut": details.get("timedOut") is True,
            "output": output or text,
        }
    if status in ("approval-pending", "approval-unavailable"):

        def string_or(key: str, default: str | None) -> str | None:
            value = details.get(key)
            return value if isinstance(value, str) else default

        return {
            "status": status,
            "reason": string_or("reason", None),
            "host": string_or("host", None),
            "command": string_or("command", ""),
            "warningText": string_or("warningText", ""),
        }
    return None


def _process_fingerprint(action: object, details: dict[str, Any], text: str) -> dict[str, Any] | None:
    status = details.get("status", UNDEFINED)
    if action == "poll":
        return {
            "action": action,
            "status": status,
            "exitCode": details.get("exitCode"),
            "exitSignal": details.get("exitSignal"),
            "aggregated": details.get("aggregated"),
            "text": text,
        }
    if action == "log":
        return {
            "action": action,
            "status": status,
            "totalLines": details.get("totalLines"),
            "totalChars": details.get("totalChars"),
            "truncated": details.get("truncated"),
            "exitCode": details.get("exitCode"),
            "exitSignal": details.get("exitSignal"),
            "text": text,
        }
    return None


_RAW_OUTCOME: Final = raw_json.outcome
_RAW_OUTCOME_HASH: Final = raw_json.outcome_hash
_RAW_EXEC: Final = raw_json.exec_outcome
_RAW_EXEC_HASH: Final = raw_json.exec_hash
_RAW: Final = Raw
#: tools whose results hash in a shape of their own (read from the decoded result)
_OWN_SHAPES: Final = frozenset({"exec", "process", "update_plan"})


def _exec_outcome(
    details: dict[str, Any], status: str, text: str, digester: Digester, rules_2026_08: bool
) -> OutcomeHash | None:
    """The outcome of an ``exec`` with a status (spec §3.3), a terminal failure under 2026-08;
    ``None`` for a status of no shape of its own."""
    fingerprint = _exec_fingerprint(details, status, text)
    if fingerprint is None:
        return None
    result_hash = digester.digest(fingerprint)
    if rules_2026_08:
        output = fingerprint.get("output")
        exit_code = terminal_exit_code(details, status, output if isinstance(output, str) else "")
        if exit_code is not None:
            identity = {
                "status": status,
                "exitCode": exit_code,
                "timedOut": False,
                "output": failure_shape(output),  # type: ignore[arg-type]
            }
            return result_hash, None, TERMINAL_EXEC_FAILURE, False, digester.digest(identity)
    return result_hash, None, None, False, None


def _outcome_of_text(
    tool: str, params: Any, result: Raw, digester: Digester, send_tools: Collection[str], rules_2026_08: bool
) -> OutcomeHash | None:
    """The outcome of a result kept as its JSON text, read without decoding it where it hashes
    in the general shape (spec §3.3: ``{details, text}``, or the value itself when it is no
    object) or is a finished ``exec``; ``None``: decode it and take the general path."""
    if tool == "exec":
        if digester.xxh3:
            hashed_exec = _RAW_EXEC_HASH(result)  # (None: unfinished, unsure, or maybe a failure)
            if hashed_exec is not None:
                return hashed_exec, None, None, False, None
        finished = _RAW_EXEC(result)
        return _finished_exec(finished, digester, rules_2026_08) if finished is not None else None
    if tool in _OWN_SHAPES or is_send_result(tool, params, send_tools):
        return None
    if digester.xxh3:
        hashed_text = _RAW_OUTCOME_HASH(result)  # (None: unsure, or details that say more)
        if hashed_text is not None:
            return hashed_text, None, None, False, None
    read = _RAW_OUTCOME(result)
    if read is None:
        return None
    hashed, is_object, veto, unchanged = read
    if is_object and (veto or (unchanged and rules_2026_08 and tool == "write")):
        return None
    return digester.hex(hashed), None, None, False, None


def _finished_exec(finished: raw_json.FinishedExec, digester: Digester, rules_2026_08: bool) -> OutcomeHash:
    """:func:`_exec_outcome` of a finished ``exec`` as ``raw_json.exec_outcome`` read it."""
    fingerprint, status, exit_code, timed_out, output = finished
    result_hash = digester.hex(fingerprint)
    if (
        rules_2026_08
        and exit_code  # (an int: 0 and no number are no failure)
        and not timed_out
        and output
        and output != f"(Command exited with code {exit_code})"
    ):
        identity = {
            "status": status,
            "exitCode": exit_code,
            "timedOut": False,
            "output": failure_shape(output),
        }
        return result_hash, None, TERMINAL_EXEC_FAILURE, False, digester.digest(identity)
    return result_hash, None, None, False, None


def hash_outcome(
    tool: str,
    params: Any,
    result: Any,
    error: Any,
    digester: Digester,
    send_tools: Collection[str] = (),
    revision: Revision = "2026-05",
) -> OutcomeHash:
    """The :data:`OutcomeHash` of one outcome (spec §3.3) under the rules of ``revision``.

    ``result`` is :data:`MISSING` when the tool returned nothing; ``error`` is :data:`MISSING`
    (or ``None``) when nothing was thrown, an :class:`ErrorMessage` for a thrown ``Error``, or
    any other value thrown as-is. A result kept as its JSON text (``msgspec.Raw``: see
    :mod:`detectors.raw_json`) hashes without being decoded, unless its tool or its details
    ask for a shape of their own.
    """
    rules_2026_08 = revision == "2026-08"
    if error is not _NOTHING and error is not None:
        text = error_text(error)
        return (
            "error:" + digester.digest_text(text),
            extract_unknown_tool_name(text),
            None,
            rules_2026_08,
            None,
        )
    if result is _NOTHING:
        return NO_OUTCOME
    if type(result) is _RAW:
        from_text = _outcome_of_text(tool, params, result, digester, send_tools, rules_2026_08)
        if from_text is not None:
            return from_text
        result = plain(result)
    if not isinstance(result, dict):
        return digester.digest(result), None, None, False, None
    raw_details = result.get("details")
    details: dict[str, Any] = raw_details if isinstance(raw_details, dict) else {}
    text = content_text(result)
    status = details.get("status")
    if status == "blocked" and details.get("deniedReason") == "tool-loop":
        return (None, None, VETO, False, None) if rules_2026_08 else NO_OUTCOME
    if tool == "exec" and isinstance(status, str) and status:
        exec_outcome = _exec_outcome(details, status, text, digester, rules_2026_08)
        if exec_outcome is not None:
            return exec_outcome
    if rules_2026_08 and tool == "write" and details.get("changed") is False:
        return digester.digest(_UNCHANGED), None, None, True, None
    if tool == "process" and isinstance(params := plain(params), dict):
        fingerprint = _process_fingerprint(params.get("action"), details, text)
        if fingerprint is not None:
            return digester.digest(fingerprint), None, None, False, None
    if is_send_result(tool, params, send_tools):
        return digester.digest(strip_volatile_send_ids(details)), None, None, False, None
    if tool == "update_plan":
        return digester.digest({"details": update_plan_shape(details), "text": ""}), None, None, False, None
    return digester.digest({"details": details, "text": text}), None, None, False, None
