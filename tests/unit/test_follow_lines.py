"""``loopwatch run --follow FILE`` reads a growing file as ``tail -F`` does: appended lines,
then the file's new content after it is truncated or rotated away."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from loopwatch.streams.inputs.sources import follow_lines


async def _follow(path: Path, steps: list[tuple[str, bytes, int]]) -> tuple[list[bytes], list[int]]:
    """Follow ``path`` through ``steps``: (append / truncate / rotate, the bytes, the lines read
    by then); each step waits until the lines before it were read. The lines and their numbers."""
    seen: list[bytes] = []
    numbers: list[int] = []
    want = steps[-1][2]

    async def act() -> None:
        for what, data, _ in steps:
            if what == "append":
                with path.open("ab") as stream:
                    stream.write(data)
            elif what == "truncate":
                path.write_bytes(data)  # truncated and rewritten in place: the same file
            else:  # rotate: a last line, then the file moves away and a new one takes its path
                last, _, fresh = data.partition(b"|")
                with path.open("ab") as stream:
                    stream.write(last)
                os.rename(path, path.with_suffix(".1"))
                path.write_bytes(fresh)
            reached = next(count for w, d, count in steps if (w, d) == (what, data))
            while len(seen) < reached:
                await asyncio.sleep(0.01)

    actor = asyncio.create_task(act())
    async for _, number, line in follow_lines(str(path), poll_s=0.01):
        seen.append(line)
        numbers.append(number)
        if len(seen) == want:
            break
    await actor
    return seen, numbers


def test_appended_lines_then_a_truncated_file_then_a_rotated_one(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"a1\na2\n")
    steps = [
        ("append", b"a3\n", 3),
        ("truncate", b"b1\n", 4),
        ("append", b"b2\n", 5),
        ("rotate", b"b3\n|c1\nc2\n", 8),  # b3 written just before the move: read, not lost
        ("append", b"c3\n", 9),
    ]
    got, numbers = asyncio.run(asyncio.wait_for(_follow(path, steps), 30))
    assert got == [b"a1\n", b"a2\n", b"a3\n", b"b1\n", b"b2\n", b"b3\n", b"c1\n", b"c2\n", b"c3\n"]
    # each line's number in its file as it was then (a bad event is reported at file:number)
    assert numbers == [1, 2, 3, 1, 2, 3, 1, 2, 3]
