"""Input files that may be gzip-compressed (``events.jsonl.gz``, a ``session.jsonl.gz`` kept by
a log rotation): opened and read as their content, recognised by gzip's magic bytes, whatever
their name; their kind is the suffix before ``.gz``."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import BinaryIO, Final

__all__ = ["content_suffix", "is_gzip", "open_input", "read_input"]

_GZIP_MAGIC: Final = b"\x1f\x8b"


def is_gzip(path: Path) -> bool:
    """Whether the file starts with gzip's magic bytes."""
    try:
        with path.open("rb") as stream:
            return stream.read(2) == _GZIP_MAGIC
    except OSError:
        return False


def open_input(path: Path) -> BinaryIO:
    """The file's content as a binary stream (decompressed when it is gzip)."""
    if is_gzip(path):
        return gzip.open(path, "rb")  # type: ignore[return-value]  # (a GzipFile is a BinaryIO)
    return path.open("rb")


def read_input(path: Path) -> bytes:
    """The file's whole content (decompressed when it is gzip)."""
    with open_input(path) as stream:
        return stream.read()


def content_suffix(path: Path) -> str:
    """The suffix of what the file holds: ``.jsonl`` for ``events.jsonl`` and ``events.jsonl.gz``."""
    return Path(path.stem).suffix if path.suffix == ".gz" else path.suffix
