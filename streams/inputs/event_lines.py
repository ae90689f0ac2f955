"""Reading JSONL event streams: every line decoded, invalid ones reported with where."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from loopwatch.detectors.decoding import decode_event
from loopwatch.detectors.events import Event, InvalidEvent

__all__ = ["BadLine", "decode_line", "read_events", "read_sourced_events"]


@dataclass(frozen=True, slots=True)
class BadLine:
    """An input line that is not a valid event."""

    source: str
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.source}:{self.line}: {self.reason}"


#: a UTF-8 byte order mark, as some Windows editors start a file with
_BOM = b"\xef\xbb\xbf"


def decode_line(source: str, number: int, raw: bytes, max_bytes: int = 1_048_576) -> Event | BadLine | None:
    """Line ``number`` of ``source``: its event, a :class:`BadLine`, or ``None`` when blank."""
    line = raw.strip()
    if number == 1 and line.startswith(_BOM):
        line = line[len(_BOM) :].strip()
    if not line:
        return None
    if len(line) > max_bytes:
        return BadLine(source, number, f"event of {len(line)} bytes exceeds the limit of {max_bytes}")
    try:
        return decode_event(line)
    except InvalidEvent as exc:
        return BadLine(source, number, exc.reason)


def read_sourced_events(
    lines: Iterable[tuple[str, bytes]], max_bytes: int = 1_048_576
) -> Iterator[Event | BadLine]:
    """Decode each non-blank ``(source, line)``; yield the event or a :class:`BadLine`."""
    numbers: dict[str, int] = {}
    for source, raw in lines:
        number = numbers[source] = numbers.get(source, 0) + 1
        item = decode_line(source, number, raw, max_bytes)
        if item is not None:
            yield item


def read_events(lines: Iterable[bytes], source: str, max_bytes: int = 1_048_576) -> Iterator[Event | BadLine]:
    """Decode the lines of one source (never raises)."""
    return read_sourced_events(((source, line) for line in lines), max_bytes)
