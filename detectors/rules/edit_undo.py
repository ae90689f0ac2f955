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

from typing import Any, Final, NamedTuple

import xxhash
from msgspec import UNSET

from loopwatch.config.loop_detection import ResolvedLoopDetection
from loopwatch.config.rule_sections import RuleSection
from loopwatch.config.sections import Positive
from loopwatch.detectors.rule_state import RuleState
from loopwatch.detectors.rules.base import CRITICAL, WARNING, CallContext, Detection, Rule, stronger
from loopwatch.detectors.stable_json import _sanitize_surrogates, plain

__all__ = [
    "DETECTOR",
    "RULE",
    "SECTION",
    "FileVersions",
    "PathEdits",
    "Settings",
    "critical_message",
    "warning_key",
    "warning_message",
]

DETECTOR: Final = "edit_undo"
KEPT: Final = 32
PATHS: Final = 256

#: ``loopwatch.detectors.editUndo``
Settings = NamedTuple(  # noqa: UP014 (a class body's types are lost to mypyc; these are kept)
    "Settings", [("enabled", bool), ("warning_threshold", Positive), ("critical_threshold", Positive)]
)


def explain(settings: Settings) -> tuple[str, str] | None:
    if not settings.enabled:
        return None
    return "on", (
        f"warns when a file returns to an earlier version {settings.warning_threshold} times, "
        f"blocks at {settings.critical_threshold}"
    )


SECTION: Final = RuleSection(
    DETECTOR,
    "a file changed back to an earlier version.",
    Settings(enabled=False, warning_threshold=3, critical_threshold=5),
    ordered=(("warning_threshold", "critical_threshold"),),
    explain=explain,
)


class PathEdits:
    """What ``edit_undo`` keeps of one path: recent content digests, recent edits, the count."""

    __slots__ = ("changes", "contents", "count")

    def __init__(
        self, contents: list[str] | None = None, changes: list[str] | None = None, count: int = 0
    ) -> None:
        self.contents: list[str] = contents if contents is not None else []
        self.changes: list[str] = changes if changes is not None else []
        self.count = count


class FileVersions(RuleState):
    """Per path, most recently changed last (at most :data:`PATHS` paths)."""

    __slots__ = ("paths",)

    def __init__(self, paths: dict[str, PathEdits] | None = None) -> None:
        self.paths: dict[str, PathEdits] = paths if paths is not None else {}

    def dump(self) -> Any:
        return [[path, e.contents, e.changes, e.count] for path, e in self.paths.items()]

    def track(self, path: str) -> PathEdits:
        paths = self.paths
        track = paths.pop(path, None)
        if track is None:
            track = PathEdits()
            if len(paths) >= PATHS:
                del paths[next(iter(paths))]
        paths[path] = track  # most recent last
        return track


class EditUndo(Rule):
    """Observes every write and edit (when on); a revert or undo count at a threshold speaks."""

    def __init__(self) -> None:
        super().__init__(DETECTOR, section=SECTION, runtime_loop=runtime_loop)

    def active(self, resolved: ResolvedLoopDetection) -> bool:
        return resolved.rules.get(SECTION).enabled

    def on_call(self, ctx: CallContext, found: Detection | None) -> Detection | None:
        settings = ctx.resolved.rules.get(SECTION)
        params = ctx.event.params
        if not settings.enabled or params is UNSET:
            return found
        state = ctx.state
        versions = state.rule_states.get(DETECTOR)
        if not isinstance(versions, FileVersions):
            versions = FileVersions()
        change = observe_call(versions, ctx.tool, params)
        if versions.paths and DETECTOR not in state.rule_states:
            state.rule_states[DETECTOR] = versions
        if change is None or change[1] < settings.warning_threshold:
            return found
        path, count = change
        critical = count >= settings.critical_threshold
        message = (critical_message if critical else warning_message)(path, count)
        level = CRITICAL if critical else WARNING
        own = Detection(
            level, DETECTOR, count, message, warning_key(path), None, None, settings.warning_threshold
        )
        return stronger(found, own)

    def load_state(self, raw: Any) -> FileVersions:
        return FileVersions({path: PathEdits(list(c), list(h), n) for path, c, h, n in raw})


def _digest(text: str) -> str:
    return xxhash.xxh3_64_hexdigest(text.encode("utf-8", "surrogatepass"))


def _string(params: dict[str, Any], *keys: str) -> str | None:
    for key in keys:
        value = params.get(key)
        if isinstance(value, str):
            return value
    return None


def observe_call(versions: FileVersions, tool: str, params: Any) -> tuple[str, int] | None:
    """``(path, count)`` when this call reverts or undoes an earlier change, else ``None``."""
    name = tool.lower()
    if name != "write" and name != "edit":
        return None
    params = plain(params)  # (a call's JSON text decoded only for the tools this rule reads)
    if not isinstance(params, dict):
        return None
    path = _string(params, "path", "file_path")
    if not path:
        return None
    path = _sanitize_surrogates(path)  # a key of the state and a part of the message: encodable
    if name == "write":
        content = _string(params, "content")
        if content is None:
            return None
        track = versions.track(path)
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
        track = versions.track(path)
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


def runtime_loop(tool: str, count: int) -> str:
    return f"the same edit was made and undone {count} times"


RULE: Final[EditUndo] = EditUndo()
