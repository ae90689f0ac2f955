"""``loopwatch run``: events in (file, folder, stdin, or a followed file), verdicts out, in
input order, through the embedded runtime; optionally with the live dashboard.

Fleet alerts (``fleet_alert`` lines, as the worker publishes them on ``loopwatch.alerts``)
follow the outputs of the event that raised them."""

from __future__ import annotations

import argparse
import asyncio
import os
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import BinaryIO, TextIO

from loopwatch.detectors.events import Event, encode_output
from loopwatch.detectors.fleet.alerts import FleetAlert, encode_alert
from loopwatch.streams.embedded.runtime import EmbeddedRuntime
from loopwatch.streams.fleet_view.dashboard import parse_address, serve_until_interrupted, serving
from loopwatch.streams.fleet_view.view import FleetView
from loopwatch.streams.history.transcripts import is_transcript
from loopwatch.streams.inputs.compressed import open_input
from loopwatch.streams.inputs.config_files import load_config
from loopwatch.streams.inputs.event_lines import WIDE_TEXT, BadLine, decode_line, read_sourced_events
from loopwatch.streams.inputs.sources import InputError, event_files, follow_lines, input_lines

__all__ = ["run_embedded"]


def _valid(items: Iterable[Event | BadLine], err: TextIO, tally: dict[str, int]) -> Iterator[Event]:
    for item in items:
        if isinstance(item, BadLine):
            tally["invalid"] += 1
            print(f"loopwatch: skipped invalid event at {item}", file=err)
        else:
            tally["valid"] += 1
            yield item


async def _followed(path: str, max_bytes: int, err: TextIO, tally: dict[str, int]) -> AsyncIterator[Event]:
    wide: set[str] = set()  # files in UTF-16 or UTF-32: named once, their lines not read
    async for where, number, line in follow_lines(path):
        if where in wide:
            continue
        item = decode_line(where, number, line, max_bytes, texts=True)
        if isinstance(item, BadLine) and item.reason is WIDE_TEXT:
            wide.add(where)
        if item is not None:
            for event in _valid((item,), err, tally):
                yield event


def _verdict_on_input(tally: dict[str, int], source: str, err: TextIO) -> int:
    """The exit status once the input is read: 1 when no line of it was a valid event."""
    invalid, valid = tally["invalid"], tally["valid"]
    if invalid:
        print(f"loopwatch: {invalid} of {invalid + valid} lines were not valid events (skipped)", file=err)
    if not valid:
        print(
            f"loopwatch: {'stdin' if source == '-' else source}: "
            + ("no valid event, " if invalid else "no events (empty), ")
            + "nothing was run. Event lines are described by "
            "`loopwatch run --help`; OpenClaw session transcripts are read by `loopwatch replay` "
            "and converted by `loopwatch import`.",
            file=err,
        )
        return 1
    return 0


def _checked_paths(events: str | None, output: str | None, follow: bool) -> None:
    """The input and the output, before anything is written: a missing input leaves the output
    file as it was, and an output that is one of the input files is refused (writing it would
    empty the input first)."""
    stdin = events is None or events == "-"
    if follow and stdin:
        raise InputError("--follow needs a file; stdin is read to its end without it")
    inputs = [] if stdin else event_files(str(events))
    if not output:
        return
    target = Path(output)
    if target.is_dir():
        raise InputError(f"--output {output}: is a folder, not a file")
    if not target.parent.is_dir():
        raise InputError(f"--output {output}: the folder {target.parent} does not exist")
    if target.exists():
        for path in inputs:
            if os.path.samefile(path, target):
                raise InputError(f"--output {output} is the input {path}: writing would destroy the events")


def _a_transcript(events: str | None) -> Path | None:
    """The first file of the input that is an OpenClaw session transcript, if one is."""
    if events is None or events == "-":
        return None
    for path in event_files(events):
        with open_input(path) as stream:
            if is_transcript(stream.readline()):
                return path
    return None


def run_embedded(args: argparse.Namespace, out: BinaryIO, err: TextIO) -> int:
    config = load_config(args.config)
    max_bytes = config.settings.max_event_bytes
    if args.serve:
        parse_address(args.serve)  # before the input is read
    _checked_paths(args.events, args.output, args.follow)
    transcript = _a_transcript(args.events)
    if transcript is not None:  # no event line to run, as for any input without one (exit 1)
        print(
            f"loopwatch: {transcript} is an OpenClaw session transcript, not event lines: "
            f"`loopwatch replay {transcript}` runs it through the detectors, "
            f"`loopwatch import {transcript}` turns it into events",
            file=err,
        )
        return 1
    try:
        sink: BinaryIO = open(args.output, "wb") if args.output else out  # noqa: SIM115 - closed below
    except OSError as exc:
        raise InputError(f"--output {args.output}: {exc.strerror}") from exc
    view = FleetView("loopwatch run (embedded)") if args.serve else None
    live = bool(args.follow or args.serve)  # someone watches: flush every verdict
    tally = {"valid": 0, "invalid": 0}

    async def main() -> None:
        source: Iterable[Event] | AsyncIterator[Event] = (
            _followed(args.events, max_bytes, err, tally)
            if args.follow
            else _valid(read_sourced_events(input_lines(args.events), max_bytes, texts=True), err, tally)
        )
        async with AsyncExitStack() as stack:
            if view is not None:
                await stack.enter_async_context(serving(view, args.serve, err))
            async with EmbeddedRuntime(config, workers=args.workers, view=view) as runtime:
                async for outputs in runtime.run(source):
                    for output in outputs:
                        line = (
                            encode_alert(output) if isinstance(output, FleetAlert) else encode_output(output)
                        )
                        sink.write(line + b"\n")
                    if outputs and live:
                        sink.flush()
            if view is not None:
                sink.flush()
                await serve_until_interrupted(err)

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        return 130
    finally:
        sink.flush()
        if sink is not out:
            sink.close()
    return _verdict_on_input(tally, args.events, err)
