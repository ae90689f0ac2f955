"""``edit_undo`` (loopwatch's own, off by default): changes that undo each other.

OpenClaw's write churn resets when a file returns to an earlier version, so an agent that
applies and reverts the same change forever is never caught. Per run and path:

* a ``write`` (``path`` or ``file_path``, ``content``) is a *revert* when its content differs
  from the immediately previous one and equals one of the path's last 32 contents before it
  (writing the same version again is no revert);
* an ``edit`` (``oldText``/``newText`` or ``old_string``/``new_string``) is an *undo* when
  it reverses one of the path's last 32 edits.

The path's count (reverts plus undos) is taken at the call, whether or not it succeeds; a
revert or undo at ``warningThreshold`` (3) warns, at ``criticalThreshold`` (5) blocks.
Trace: write A, B, A (1), B (2), A (3: warning), B (4), A (5: blocked). Writes A, B, C
never revert; an edit x→y and an unrelated edit z→w of the same file are no undo. Tool
names are matched case-insensitively (``Write``/``Edit`` of Claude Code too). Calls in
digest-only mode carry no contents and are not seen.
"""

from __future__ import annotations

from typing import Any, Final

import xxhash

from loopwatch.detectors.stable_json import _sanitize_surrogates
from loopwatch.detectors.state import PathEdits, RunState

__all__ = ["DETECTOR", "critical_message", "observe_call", "warning_key", "warning_message"]

DETECTOR: Final = "edit_undo"
KEPT: Final = 32
PATHS: Final = 256


def _digest(text: str) -> str:
    return xxhash.xxh3_64_hexdigest(text.encode("utf-8", "surrogatepass"))


def _string(params: dict[str, Any], *keys: str) -> str | None:
    for key in keys:
        value = params.get(key)
        if isinstance(value, str):
            return value
    return None


def _track(state: RunState, path: str) -> PathEdits:
    edits = state.edits
    track = edits.pop(path, None)
    if track is None:
        track = PathEdits()
        if len(edits) >= PATHS:
            del edits[next(iter(edits))]
    edits[path] = track  # most recent last
    return track


def observe_call(state: RunState, tool: str, params: Any) -> tuple[str, int] | None:
    """``(path, count)`` when this call reverts or undoes an earlier change, else ``None``."""
    name = tool.lower()
    if (name != "write" and name != "edit") or not isinstance(params, dict):
        return None
    path = _string(params, "path", "file_path")
    if not path:
        return None
    path = _sanitize_surrogates(path)  # a key of the state and a part of the message: encodable
    if name == "write":
        content = _string(params, "content")
        if content is None:
            return None
        track = _track(state, path)
        digest = _digest(content)
        contents = track.contents
        back = bool(contents) and digest != contents[-1] and digest in contents[:-1]
        contents.append(digest)
        if len(contents) > KEPT:
            del contents[0]
    else:
        old = _string(params, "oldText", "old_string")
        new = _string(params, "newText", "new_string")
        if old is None or new is None:
            return None
        track = _track(state, path)
        pair = f"{_digest(old)}>{_digest(new)}"
        back = f"{_digest(new)}>{_digest(old)}" in track.changes
        track.changes.append(pair)
        if len(track.changes) > KEPT:
            del track.changes[0]
    if not back:
        return None
    track.count += 1
    return path, track.count


def critical_message(path: str, count: int) -> str:
    return (
        f"CRITICAL: {path} was changed back to an earlier version {count} times. The edits are "
        "undoing each other; stop and report the task as failed."
    )


def warning_message(path: str, count: int) -> str:
    return (
        f"WARNING: {path} returned to an earlier version {count} times. Decide on one version "
        "instead of alternating."
    )


def warning_key(path: str) -> str:
    return f"edit-undo:{path}"
