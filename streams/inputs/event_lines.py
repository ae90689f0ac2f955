"""Reading JSONL event streams: every line decoded, invalid ones reported with where."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from loopwatch.detectors.decoding import decode_event
from loopwatch.detectors.events import Event, InvalidEvent
from loopwatch.streams.inputs.compressed import open_input

__all__ = [
    "WIDE_TEXT",
    "BadLine",
    "decode_line",
    "is_wide_text",
    "read_events",
    "read_sourced_events",
    "starts_an_event_stream",
]


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


#: byte order marks of UTF-16 and UTF-32 (PowerShell's ``>`` writes UTF-16 with one)
_WIDE_MARKS = (b"\xff\xfe", b"\xfe\xff", b"\x00\x00\xfe\xff")
WIDE_TEXT = (
    "the input is UTF-16 or UTF-32 text (PowerShell's `>` writes UTF-16); event lines are UTF-8 "
    "JSON: convert it first (PowerShell: `Get-Content IN | Set-Content -Encoding utf8 OUT`; "
    "elsewhere: `iconv -f UTF-16 -t UTF-8 IN > OUT`)"
)


def is_wide_text(first_line: bytes) -> bool:
    """Whether a file's first line is UTF-16 or UTF-32: a byte order mark of theirs, or a zero
    byte among the first two (JSON text starts with ASCII, which UTF-8 writes without zeros)."""
    return first_line.startswith(_WIDE_MARKS) or b"\x00" in first_line[:2]


def decode_line(
    source: str, number: int, raw: bytes, max_bytes: int = 1_048_576, texts: bool = False
) -> Event | BadLine | None:
    """Line ``number`` of ``source``: its event, a :class:`BadLine`, or ``None`` when blank
    (``texts``: as :func:`~detectors.decoding.decode_event` takes it, for the engine)."""
    if number == 1 and is_wide_text(raw):
        return BadLine(source, number, WIDE_TEXT)
    line = raw.strip()
    if number == 1 and line.startswith(_BOM):
        line = line[len(_BOM) :].strip()
    if not line:
        return None
    if len(line) > max_bytes:
        return BadLine(source, number, f"event of {len(line)} bytes exceeds the limit of {max_bytes}")
    try:
        return decode_event(line, texts)
    except InvalidEvent as exc:
        return BadLine(source, number, exc.reason)


def read_sourced_events(
    lines: Iterable[tuple[str, bytes]], max_bytes: int = 1_048_576, texts: bool = False
) -> Iterator[Event | BadLine]:
    """Decode each non-blank ``(source, line)``; yield the event or a :class:`BadLine` (one for
    a source in UTF-16 or UTF-32, whose other lines are not read)."""
    numbers: dict[str, int] = {}
    wide: set[str] = set()
    for source, raw in lines:
        if source in wide:
            continue
        number = numbers[source] = numbers.get(source, 0) + 1
        item = decode_line(source, number, raw, max_bytes, texts)
        if item is not None:
            if type(item) is BadLine and item.reason is WIDE_TEXT:
                wide.add(source)
            yield item


def read_events(lines: Iterable[bytes], source: str, max_bytes: int = 1_048_576) -> Iterator[Event | BadLine]:
    """Decode the lines of one source (never raises)."""
    return read_sourced_events(((source, line) for line in lines), max_bytes)


def starts_an_event_stream(path: Path, max_bytes: int = 1_048_576) -> bool:
    """Whether a file's first non-blank line is a loopwatch event (a folder's other files,
    conformance vectors or a manifest, are not read line by line)."""
    try:
        with open_input(path) as stream:
            for raw in stream:
                if raw.strip():
                    return type(decode_line(str(path), 1, raw, max_bytes, False)) is not BadLine
    except (OSError, EOFError):  # (EOFError: a gzip file cut short)
        return False
    return False
