"""Byte streams split into lines (stdio) and Server-Sent Events (streamable HTTP), each kept
as the exact bytes it came as, so what the proxy does not change goes on byte for byte.

An event ends at a blank line (``\\n`` or ``\\r\\n``, as MCP's SDKs write them); its ``data``
is its ``data:`` lines joined by ``\\n`` (the SSE rules: one space after the colon is not part
of the value). :func:`with_data` gives the event with other data, its other fields (``id:``,
``event:``, ``retry:``, comments) kept where they were.
"""

from __future__ import annotations

__all__ = ["EventSplitter", "LineSplitter", "event_data", "with_data"]


class LineSplitter:
    """Lines of a byte stream, each with its ``\\n``; what follows the last one is :meth:`rest`."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, chunk: bytes) -> list[bytes]:
        if b"\n" not in chunk:
            self._buffer += chunk
            return []
        data = bytes(self._buffer) + chunk if self._buffer else chunk
        lines = data.split(b"\n")
        self._buffer = bytearray(lines.pop())
        return [line + b"\n" for line in lines]

    def rest(self) -> bytes:
        """What came after the last line break (a last line without one)."""
        rest = bytes(self._buffer)
        self._buffer.clear()
        return rest


class EventSplitter:
    """Events of an SSE byte stream, each with the blank line that ends it."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._line = 0  # where the line being read starts
        self._searched = 0  # how far it was searched for its end (a long line comes in many chunks)

    def feed(self, chunk: bytes) -> list[bytes]:
        self._buffer += chunk
        events: list[bytes] = []
        buffer = self._buffer
        while (newline := buffer.find(b"\n", self._searched)) >= 0:
            start = self._line
            self._line = self._searched = newline + 1
            if newline == start or (newline == start + 1 and buffer[start] == 0x0D):  # a blank line
                events.append(bytes(buffer[: self._line]))
                del buffer[: self._line]
                self._line = self._searched = 0
        self._searched = len(buffer)
        return events

    def rest(self) -> bytes:
        """What came after the last whole event (a stream cut in the middle of one)."""
        rest = bytes(self._buffer)
        self._buffer.clear()
        self._line = self._searched = 0
        return rest


def _field(line: bytes) -> tuple[bytes, bytes]:
    name, colon, value = line.partition(b":")
    if colon and value.startswith(b" "):
        value = value[1:]
    return name, value


def _lines(event: bytes) -> list[bytes]:
    return [line.removesuffix(b"\r") for line in event.split(b"\n")]


def event_data(event: bytes) -> bytes | None:
    """The event's data (None: it has no ``data`` field)."""
    values = [value for name, value in map(_field, _lines(event)) if name == b"data"]
    return b"\n".join(values) if values else None


def with_data(event: bytes, data: bytes) -> bytes:
    """The event with ``data`` (one line: no line break in it) in place of its data."""
    out: list[bytes] = []
    placed = False
    for line in _lines(event)[:-2]:  # (the last two: the blank line and what follows its \n)
        if _field(line)[0] == b"data":
            if not placed:
                out.append(b"data: " + data)
                placed = True
            continue
        out.append(line)
    if not placed:
        out.append(b"data: " + data)
    return b"\n".join(out) + b"\n\n"
