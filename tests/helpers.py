"""Trace builders for tests: readable event sequences without hand-written JSON."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from loopwatch.detectors.events import CompactionRetry, Event, RunEnd, ToolCall, ToolResult
from loopwatch.detectors.stable_json import from_python

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
FIXTURES = ROOT / "streams" / "embedded" / "data" / "fixtures"
VECTORS = DATA / "openclaw-public.jsonl"
NEWEST_VECTORS = DATA / "openclaw-newest.jsonl"


class Trace:
    """Builds the events of one run: ``trace.call(...)``, ``trace.result(...)``."""

    _ids = itertools.count()

    def __init__(self, run_id: str = "run-1", agent_id: str = "default") -> None:
        self.run_id = run_id
        self.agent_id = agent_id
        self.events: list[Event] = []

    @classmethod
    def of(cls, events: list[Event], run_id: str = "run-1") -> Trace:
        """A trace of ready-made events."""
        trace = cls(run_id)
        trace.events = list(events)
        return trace

    def _event_id(self) -> str:
        return f"{self.run_id}-e{next(self._ids)}"

    def call(self, tool: str, params: Any, call_id: str | None = None, ts: int | None = None) -> ToolCall:
        event = ToolCall(
            event_id=self._event_id(),
            run_id=self.run_id,
            agent_id=self.agent_id,
            ts=ts,
            tool=tool,
            params=from_python(params),
            tool_call_id=call_id,
        )
        self.events.append(event)
        return event

    def result(
        self,
        tool: str,
        params: Any,
        result: Any = None,
        error: str | None = None,
        call_id: str | None = None,
        ts: int | None = None,
    ) -> ToolResult:
        from msgspec import UNSET

        event = ToolResult(
            event_id=self._event_id(),
            run_id=self.run_id,
            agent_id=self.agent_id,
            ts=ts,
            tool=tool,
            params=from_python(params),
            result=UNSET if error is not None else from_python(result),
            error=error if error is not None else UNSET,
            tool_call_id=call_id,
        )
        self.events.append(event)
        return event

    def both(self, tool: str, params: Any, result: Any = None, error: str | None = None) -> None:
        call_id = f"c{len(self.events)}"
        self.call(tool, params, call_id)
        self.result(tool, params, result, error, call_id)

    def compaction(self) -> None:
        self.events.append(CompactionRetry(event_id=self._event_id(), run_id=self.run_id))

    def end(self) -> None:
        self.events.append(RunEnd(event_id=self._event_id(), run_id=self.run_id))


def text_result(text: str, **details: Any) -> dict[str, Any]:
    """An OpenClaw-shaped tool result."""
    return {"content": [{"type": "text", "text": text}], "details": details}


def with_revision(revision: str, config: Any = None) -> Any:
    """``config`` (default: detection enabled) under OpenClaw rule revision ``revision``."""
    from dataclasses import replace

    import msgspec

    from loopwatch.config import FleetConfig

    base = config if config is not None else FleetConfig.enabled_default()
    return replace(base, settings=msgspec.structs.replace(base.settings, openclaw_revision=revision))


def wait_for_line(stream: Any, pattern: str, timeout: float = 60) -> str:
    """The first line of a process's text ``stream`` that contains ``pattern`` (read in a thread,
    so a process that never prints it fails the test after ``timeout`` instead of hanging it)."""
    import queue
    import threading

    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in stream:
            lines.put(line)
            if pattern in line:
                return
        lines.put("")  # the stream ended

    threading.Thread(target=read, daemon=True).start()
    seen: list[str] = []
    while True:
        try:
            line = lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no line with {pattern!r} within {timeout} s; saw {seen}") from None
        if pattern in line:
            return line
        if not line:
            raise AssertionError(f"the stream ended without a line with {pattern!r}; saw {seen}")
        seen.append(line.rstrip())


def post_json(url: str, body: Any, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    """POST ``body`` (bytes as they are, anything else as JSON) with a JSON content type; the
    status and the decoded answer, also for an error status."""
    import json
    import urllib.error
    import urllib.request

    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(
        url, data=data, headers={"Content-Type": "application/json", **(headers or {})}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read() or b"{}")
    except urllib.error.HTTPError as refused:
        with refused:
            return refused.code, json.loads(refused.read() or b"{}")


def listening_addresses(port: int) -> set[str]:
    """The local addresses of this machine's TCP sockets listening on ``port`` (from
    /proc/net/tcp and tcp6: no traffic is sent), e.g. ``{"127.0.0.1"}`` or ``{"0.0.0.0"}``."""
    import ipaddress

    found: set[str] = set()
    for table, size in (("/proc/net/tcp", 4), ("/proc/net/tcp6", 16)):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            address, hex_port = fields[1].split(":")
            if fields[3] != "0A" or int(hex_port, 16) != port:  # 0A: LISTEN
                continue
            raw = bytes.fromhex(address)
            # the kernel prints each 32-bit word in host (little-endian) order
            packed = b"".join(raw[i : i + 4][::-1] for i in range(0, size, 4))
            found.add(str(ipaddress.ip_address(packed)))
    return found
