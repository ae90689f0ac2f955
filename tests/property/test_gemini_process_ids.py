"""The Gemini hook's process-id cut is the regex it replaced, in linear time: the same text for
any shell output built from the pieces that matter (the id lines, the context tag, whitespace
of every kind, digits and other text)."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from loopwatch.streams.gateway.hooks.gemini import without_process_ids

#: the previous definition: right, but quadratic in a run of whitespace at every position
REFERENCE = re.compile(
    r"(?:\nBackground PIDs: [0-9, ]+)?(?:\nProcess Group PGID: [0-9]+)?(?=(?:\n</untrusted_context>)?\s*\Z)"
)

PIECES = st.sampled_from(
    [
        "\nBackground PIDs: ",
        "\nProcess Group PGID: ",
        "\n</untrusted_context>",
        "<untrusted_context>\n",
        "Output: ",
        "Exit Code: 1",
        "\n",
        " ",
        "\t",
        "\u00a0",
        "\x1c",
        "\u3000",
        ",",
        "12",
        "7",
        "x",
        "é",
    ]
)


@settings(max_examples=3000, deadline=None)
@given(st.lists(PIECES, max_size=14))
def test_the_cut_is_the_reference_regex_s(pieces: list[str]) -> None:
    text = "".join(pieces)
    assert without_process_ids(text) == REFERENCE.sub("", text, count=1)


def test_a_real_shell_result_loses_only_its_process_lines() -> None:
    real = (
        "<untrusted_context>\nOutput: ls: cannot access 'x': No such file or directory\nExit Code: 2"
        "\nBackground PIDs: 2130, 2131\nProcess Group PGID: 2128\n</untrusted_context>\n"
    )
    assert without_process_ids(real) == (
        "<untrusted_context>\nOutput: ls: cannot access 'x': No such file or directory\nExit Code: 2"
        "\n</untrusted_context>\n"
    )
