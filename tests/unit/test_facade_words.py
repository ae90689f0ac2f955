"""The LoopDetector speaks loopwatch's words to its agent; the verdicts keep OpenClaw's."""

from __future__ import annotations

from loopwatch import LoopDetector
from loopwatch.detectors.events import Abort, Verdict


def test_warn_block_and_abort_are_told_in_loopwatch_s_words_with_the_verdicts_unchanged() -> None:
    detector = LoopDetector()
    decisions = []
    for index in range(22):
        decisions.append(detector.before_tool_call("r", "read", {"path": "/x"}, tool_call_id=f"c{index}"))
        detector.after_tool_call("r", "read", {"path": "/x"}, error="ENOENT", tool_call_id=f"c{index}")
    warned = next(d for d in decisions if d.action == "warn")
    blocked = next(d for d in decisions if d.action == "block")
    aborted = next(d for d in decisions if d.action == "abort")
    assert str(warned.message).startswith("loopwatch warning: read was called 10 times")
    assert str(blocked.message).startswith("loopwatch blocked this read call")
    assert str(aborted.message).startswith("loopwatch stopped this turn")
    assert "OpenClaw" not in " ".join(str(d.message) for d in decisions)
    # the records keep OpenClaw's sentences (the verdict topic's contract)
    verdict = next(o for o in blocked.outputs if isinstance(o, Verdict))
    assert verdict.message.startswith("CRITICAL")
    abort = next(o for o in aborted.outputs if isinstance(o, Abort))
    assert abort.message.startswith("OpenClaw stopped this run")
    later = detector.before_tool_call("r", "list", {}, tool_call_id="after")
    assert (later.action, later.sticky) == ("abort", True)
    assert str(later.message).startswith("loopwatch stopped this turn")
