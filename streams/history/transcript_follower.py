"""``loopwatch import --follow DIR``: the zero-code sidecar for OpenClaw fleets.

Follows the OpenClaw session transcripts under a folder (``~/.openclaw/agents``: new files,
appended lines, a file replaced or truncated) and publishes their events to a gateway
(``--gateway URL``) or straight to Kafka (``--kafka BOOTSTRAP``). An unmodified OpenClaw
deployment so gets fleet-wide verdicts and alerts, in observe mode (nothing blocks its calls).

Rules:

* A transcript's events are computed from the whole file each time it grows (see
  :mod:`streams.history.transcripts`). The events are stable as the file grows, except the
  ``run_end`` that closes the file's last run, which is held back until a later run starts.
* Per file, the offsets file remembers its inode and how many events were published, and is
  rewritten (atomically) after each publish. A restart resumes there. A file whose inode
  changes or that shrinks starts over.
* A crash between a publish and the offsets write re-publishes a few events with the same
  ids, which loopwatch ignores (it de-duplicates event ids): nothing is counted twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TextIO

from loopwatch.detectors.events import Event, RunEnd
from loopwatch.streams.history.transcripts import agent_from_path, is_transcript, transcript_events

__all__ = ["Follower", "publish_to_gateway", "publish_to_kafka"]

Publish = Callable[[list[Event]], Awaitable[None]]


class Follower:
    def __init__(
        self, folder: Path, publish: Publish, offsets: Path, agent_id: str | None, err: TextIO
    ) -> None:
        self.folder = folder
        self.publish = publish
        self.offsets_path = offsets
        self.agent_id = agent_id
        self.err = err
        self.offsets: dict[str, dict[str, int]] = self._load()
        self.sizes: dict[str, int] = {}
        self.published = 0
        self.transcripts: set[str] = set()  # the files seen that are transcripts

    def _load(self) -> dict[str, dict[str, int]]:
        try:
            value = json.loads(self.offsets_path.read_text())
        except (OSError, ValueError):
            return {}
        return value if isinstance(value, dict) else {}

    def _save(self) -> None:
        self.offsets_path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.offsets_path.with_suffix(".tmp")
        temporary.write_text(json.dumps(self.offsets, indent=1, sort_keys=True))
        os.replace(temporary, self.offsets_path)

    async def poll(self) -> int:
        """One pass over the folder; the number of events published."""
        published = 0
        for path in sorted(self.folder.rglob("*.jsonl")):
            try:
                stat = path.stat()
            except OSError:
                continue  # gone meanwhile
            key = str(path)
            if self.sizes.get(key) == stat.st_size and key in self.offsets:
                continue
            published += await self._file(path, key, stat.st_ino, stat.st_size)
            self.sizes[key] = stat.st_size
        return published

    async def _file(self, path: Path, key: str, inode: int, size: int) -> int:
        try:
            data = path.read_bytes()
        except OSError:
            return 0
        if not is_transcript(data.split(b"\n", 1)[0]):
            return 0
        self.transcripts.add(key)
        known = self.offsets.get(key)
        if known is None or known.get("inode") != inode or known.get("size", 0) > size:
            known = {"inode": inode, "published": 0}  # new, replaced or truncated: from the start
        agent = self.agent_id or agent_from_path(key) or "main"
        events = transcript_events(data.split(b"\n"), agent, path.stem)
        if events and isinstance(events[-1], RunEnd):
            events = events[:-1]  # the last run may go on: its end waits for a later run
        fresh = events[known["published"] :]
        if fresh:
            await self.publish(fresh)
        self.offsets[key] = {"inode": inode, "size": size, "published": len(events)}
        self._save()
        self.published += len(fresh)
        return len(fresh)

    async def run(self, interval_s: float, stop: asyncio.Event) -> None:
        resumed = sum(known.get("published", 0) for known in self.offsets.values())
        first = True
        while not stop.is_set():
            try:
                count = await self.poll()
            except OSError as exc:  # the gateway or broker is down: try again next time
                print(f"loopwatch: publishing failed ({exc}); retrying", file=self.err, flush=True)
                count = 0
            else:
                if first:  # where a restart resumed, once every file has been looked at
                    first = False
                    files = len(self.transcripts)
                    print(
                        f"loopwatch: first scan: {files} transcript{'' if files == 1 else 's'}, "
                        f"{resumed} events published before, {count} now",
                        file=self.err,
                        flush=True,
                    )
                    count = 0
            if count:
                print(
                    f"loopwatch: published {count} events ({self.published} in all)",
                    file=self.err,
                    flush=True,
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval_s)


def publish_to_gateway(url: str, token: str | None) -> Publish:
    """Events to ``POST {url}/v1/events`` as NDJSON (in chunks)."""
    import urllib.error
    import urllib.request

    from loopwatch.detectors.events import encode_event

    def send(events: list[Event]) -> None:
        for start in range(0, len(events), 200):
            body = b"\n".join(encode_event(e) for e in events[start : start + 200])
            headers = {"Content-Type": "application/x-ndjson"}
            if token:
                headers["Authorization"] = f"Bearer {token}"
            request = urllib.request.Request(url.rstrip("/") + "/v1/events", data=body, headers=headers)
            try:
                with urllib.request.urlopen(request, timeout=30) as answer:
                    answer.read()
            except urllib.error.HTTPError as exc:
                raise OSError(f"gateway answered {exc.code}: {exc.read()[:300]!r}") from exc

    async def publish(events: list[Event]) -> None:
        await asyncio.to_thread(send, events)

    return publish


def publish_to_kafka(producer: Any, topic: str) -> Publish:
    """Events to the input topic, keyed by run scope (a started aiokafka producer)."""
    from loopwatch.detectors.events import encode_event, run_scope

    async def publish(events: list[Event]) -> None:
        for event in events:
            await producer.send(topic, encode_event(event), key=run_scope(event).encode())
        await producer.flush()

    return publish
