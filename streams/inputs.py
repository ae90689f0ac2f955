"""Where events come from: a file, a folder of files, stdin, or a growing file (``--follow``)."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

from config.errors import LoopwatchError

__all__ = ["InputError", "input_lines", "source_files"]


class InputError(LoopwatchError):
    """An input that cannot be read (missing file, empty folder)."""


def _files(source: str) -> list[Path]:
    path = Path(source)
    if path.is_dir():
        files = sorted(
            p for p in path.rglob("*") if p.is_file() and p.suffix in (".jsonl", ".json", ".ndjson")
        )
        if not files:
            raise InputError(f"no .jsonl files in folder {source}")
        return files
    if not path.exists():
        raise InputError(f"no such file: {source}")
    return [path]


def source_files(source: str) -> list[Path]:
    """The files of a source (a file, or every .jsonl file under a folder)."""
    return _files(source)


def input_lines(source: str | None, follow: bool = False, poll_s: float = 0.2) -> Iterator[tuple[str, bytes]]:
    """``(where, line)`` for every line of the source; ``where`` names the file."""
    if source is None or source == "-":
        for line in sys.stdin.buffer:
            yield "<stdin>", line
        return
    files = _files(source)
    for path in files:
        with path.open("rb") as stream:
            yield from ((str(path), line) for line in stream)
            if follow and len(files) == 1:
                buffer = b""
                while True:
                    chunk = stream.readline()
                    if not chunk:
                        time.sleep(poll_s)
                        continue
                    buffer += chunk
                    if buffer.endswith(b"\n"):
                        yield str(path), buffer
                        buffer = b""
