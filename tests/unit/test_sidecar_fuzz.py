"""The sidecar against random file-system histories: appends (also of half lines), rewrites in
place, truncations, copy-truncate rotations, replacements, deletions, recreations and
restarts, with scans in between. Whatever happens, the events published (de-duplicated by id,
as loopwatch does) are exactly those of every transcript as it was at some scan: none lost,
none invented, and never two contents under one event id."""

from __future__ import annotations

import asyncio
import io
import os
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from loopwatch.detectors.events import Event
from loopwatch.streams.history.transcript_follower import Follower
from loopwatch.streams.history.transcripts import agent_from_path
from tests.unit.test_sidecar_follower import Transcript, expected


def _pool() -> list[Transcript]:
    plain = Transcript("s0").prompt("go").turn("read", 3).prompt("again").turn("exec", 2)
    plain.entry(type="message", message={"role": "assistant", "content": "done", "stopReason": "stop"})
    plain.prompt("third").turn("read", 2)
    with_ids = Transcript("s1").prompt("go")
    with_ids.entry(type="custom", customType="openclaw:bootstrap-context:full", data={"runId": "run-7"})
    with_ids.turn("read", 2).prompt("long task").turn("exec", 1)
    overflow = {"role": "assistant", "content": [], "stopReason": "error", "errorMessage": "prompt too long"}
    with_ids.entry(type="message", message=overflow).entry(type="compaction", summary="…")
    with_ids.turn("exec", 2)
    odd = Transcript("s2").prompt("go").turn("write", 2)
    odd.entries.append({"type": "model_change", "provider": "p", "modelId": "m"})  # no id
    odd.entries.append(  # a result with no id: its event is named after its line
        {"type": "message", "message": {"role": "toolResult", "toolName": "x", "content": []}}
    )
    odd.prompt("next").turn("write", 1)
    return [plain, with_ids, odd]


POOL = _pool()
FILES = ("agents/a0/sessions/t0.jsonl", "agents/a1/sessions/t1.jsonl", "agents/a1/sessions/t2.jsonl")


@dataclass(frozen=True)
class Content:
    """A file's content: the first ``lines`` lines of a pool transcript, and maybe half the next."""

    transcript: int
    lines: int
    compact: bool = True
    half: bool = False

    def all_lines(self) -> list[bytes]:
        return POOL[self.transcript].lines(self.compact)

    def data(self) -> bytes:
        lines = self.all_lines()
        data = b"".join(line + b"\n" for line in lines[: self.lines])
        if self.half and self.lines < len(lines):
            data += lines[self.lines][: len(lines[self.lines]) // 2]
        return data

    def events(self, key: str) -> list[Event]:
        agent = agent_from_path(key) or "main"
        return expected(self.all_lines()[: self.lines], agent, Path(key).stem)


def clamp(content: Content) -> Content:
    return replace(content, lines=min(content.lines, len(content.all_lines())))


files = st.sampled_from(range(len(FILES)))
pool = st.sampled_from(range(len(POOL)))
sizes = st.integers(0, 40)
OPS = st.one_of(
    st.tuples(st.just("append"), files, st.integers(1, 6), st.booleans()),
    st.tuples(st.just("rewrite"), files, pool, sizes, st.booleans()),
    st.tuples(st.just("truncate"), files, sizes),
    st.tuples(st.just("rotate"), files, pool),
    st.tuples(st.just("replace"), files, pool, sizes, st.booleans()),
    st.tuples(st.just("delete"), files),
    st.tuples(st.just("recreate"), files, pool, sizes),
    st.just(("scan",)),
    st.just(("restart",)),
)


class World:
    """The folder, its model, a follower and what it published."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.model: dict[str, Content] = {}
        self.expected: dict[str, Event] = {}
        self.published: dict[str, Event] = {}
        self.follower = self._follower()

    def _follower(self) -> Follower:
        return Follower(self.root / "agents", self.publish, self.root / "offsets.json", None, io.StringIO())

    async def publish(self, events: list[Event]) -> None:
        for event in events:
            before = self.published.setdefault(event.event_id, event)
            assert before == event, f"{event.event_id} published with two contents"

    def write(self, key: str, content: Content, how: str) -> None:
        path = self.root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        if how == "append":
            with path.open("ab") as stream:
                stream.write(content.data()[path.stat().st_size :])
        elif how == "in place":
            with path.open("r+b") as stream:
                stream.write(content.data())
                stream.truncate()
        else:  # a new inode
            temporary = path.with_suffix(".tmp")
            temporary.write_bytes(content.data())
            os.replace(temporary, path)
        self.model[key] = content

    def apply(self, op: tuple[Any, ...]) -> None:
        kind, *args = op
        if kind == "scan":
            asyncio.run(self.follower.poll())
            for key, content in self.model.items():
                for event in content.events(key):
                    assert self.expected.setdefault(event.event_id, event) == event
            return
        if kind == "restart":
            self.follower = self._follower()
            return
        key = FILES[args[0]]
        now = self.model.get(key)
        if kind == "recreate" and now is None:
            self.write(key, clamp(Content(args[1], args[2])), "new")
        elif now is None:
            return
        elif kind == "append":
            lines, half = args[1], args[2]
            self.write(key, clamp(replace(now, lines=now.lines + lines, half=half)), "append")
        elif kind == "rewrite":
            self.write(key, clamp(Content(args[1], args[2], args[3])), "in place")
        elif kind == "truncate":
            self.write(key, replace(now, lines=min(now.lines, args[1]), half=False), "in place")
        elif kind == "rotate":  # copytruncate, then the writer goes on with another transcript
            (self.root / key).with_suffix(".jsonl.1").write_bytes((self.root / key).read_bytes())
            self.write(key, Content(args[1], 0), "in place")
        elif kind == "replace":
            self.write(key, clamp(Content(args[1], args[2], args[3])), "new")
        elif kind == "delete":
            (self.root / key).unlink()
            del self.model[key]


@settings(max_examples=50, deadline=None, database=None)
@given(st.lists(st.tuples(pool, sizes), min_size=len(FILES), max_size=len(FILES)), st.lists(OPS, max_size=40))
def test_published_events_are_those_of_the_files_as_scanned(
    start: list[tuple[int, int]], ops: list[tuple[Any, ...]]
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        world = World(Path(folder))
        for key, (transcript, lines) in zip(FILES, start, strict=True):
            world.write(key, clamp(Content(transcript, lines)), "new")
        for op in [("scan",), *ops, ("scan",)]:
            world.apply(op)
        assert set(world.published) == set(world.expected)
        for event_id, event in world.expected.items():
            assert world.published[event_id] == event
