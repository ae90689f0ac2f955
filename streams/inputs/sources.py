"""Where events come from: a file, a folder of files, stdin, or a growing file (``--follow``)."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

from loopwatch.config.errors import LoopwatchError
from loopwatch.streams.history.transcripts import is_checkpoint_copy
from loopwatch.streams.inputs.compressed import content_suffix, open_input

__all__ = ["InputError", "event_files", "follow_lines", "input_lines", "source_files"]


class InputError(LoopwatchError):
    """An input that cannot be read (missing file, empty folder)."""


_EVENT_SUFFIXES = (".jsonl", ".json", ".ndjson")


def _files(source: str, suffixes: tuple[str, ...] = _EVENT_SUFFIXES) -> list[Path]:
    path = Path(source)
    if path.is_dir():  # (an OpenClaw transcript's pre-compaction copies repeat its entries)
        files = sorted(
            p
            for p in path.rglob("*")
            if p.is_file() and content_suffix(p) in suffixes and not is_checkpoint_copy(p.name)
        )
        if not files:
            raise InputError(f"no .jsonl files in folder {source}")
        return files
    if not path.exists():
        raise InputError(f"no such file: {source}")
    return [path]


def event_files(source: str) -> list[Path]:
    """The event files of a source (a file, or every .jsonl file under a folder, gzip-compressed
    ones too: ``.jsonl.gz``);
    :class:`InputError` when there is none."""
    return _files(source)


def source_files(source: str) -> list[Path]:
    """The files of a source (a file, or every .jsonl file under a folder, and every .sqlite
    file: OpenClaw 2026.8+ keeps its transcripts in SQLite)."""
    return _files(source, (*_EVENT_SUFFIXES, ".sqlite"))


def input_lines(source: str | None) -> Iterator[tuple[str, bytes]]:
    """``(where, line)`` for every line of the source; ``where`` names the file."""
    if source is None or source == "-":
        for line in sys.stdin.buffer:
            yield "<stdin>", line
        return
    for path in _files(source):
        with open_input(path) as stream:
            yield from ((str(path), line) for line in stream)


async def follow_lines(source: str, poll_s: float = 0.2) -> AsyncIterator[tuple[str, int, bytes]]:
    """``(where, number, line)`` for every line of a file, then every line appended to it, for
    as long as it is read (``number`` counts from 1 in the file as it is now).

    A file truncated (shorter than what was read) is read again from its start, and a file
    rotated away (another file at the path: ``logrotate``, ``mv`` and a new one) is left for
    the new one, read from its start, as ``tail -F`` does; either starts the count again."""
    if Path(source).is_dir():
        raise InputError(f"--follow needs a file, not a folder: {source}")
    [path] = _files(source)
    stream = path.open("rb")
    try:
        buffer = b""
        number = 0
        while True:
            chunk = stream.readline()
            if chunk:
                buffer += chunk
                if buffer.endswith(b"\n"):
                    number += 1
                    yield str(path), number, buffer
                    buffer = b""
                continue
            await asyncio.sleep(poll_s)
            try:
                now = path.stat()
            except OSError:  # moved away, the new file not there yet
                continue
            read = os.fstat(stream.fileno())
            if (now.st_dev, now.st_ino) != (read.st_dev, read.st_ino):
                if stream.tell() < read.st_size:  # written before it moved away: read it first
                    continue
                try:
                    rotated = path.open("rb")
                except OSError:  # gone again meanwhile
                    continue
                stream.close()
                stream, buffer, number = rotated, b"", 0
            elif now.st_size < stream.tell():
                stream.seek(0)
                buffer, number = b"", 0
    finally:
        stream.close()
