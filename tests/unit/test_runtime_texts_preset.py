"""What a runtime other than OpenClaw shows its model for the agents preset's verdicts."""

from __future__ import annotations

import pytest

from loopwatch.detectors.runtime_texts import block_text, warning_text


@pytest.mark.parametrize(
    ("detector", "phrase"),
    [
        ("same_call_streak", "javac was called 5 times in a row with the same arguments"),
        ("call_cycle", "the same few calls went round 5 times in the same order"),
        ("same_failure", "the last 5 tool calls all failed the same way"),
    ],
)
def test_each_preset_rule_is_told_in_loopwatch_s_words_with_its_reason_code(
    detector: str, phrase: str
) -> None:
    blocked = block_text(detector, "javac", 5)
    warned = warning_text(detector, "javac", 5)
    for text in (blocked, warned):
        assert phrase in text
        assert f"[{detector}]" in text
        assert "a loop was detected" not in text  # not the text of a detector loopwatch does not know
        assert "OpenClaw" not in text
