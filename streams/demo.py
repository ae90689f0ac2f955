"""``loopwatch demo``: the bundled real OpenClaw traces through the core, summarised."""

from __future__ import annotations

import argparse
from collections import Counter
from typing import BinaryIO, TextIO

from detectors.engine import Engine
from detectors.events import Abort, Verdict
from streams.config_files import load_config
from streams.event_lines import BadLine, read_events

__all__ = ["run_demo"]


def run_demo(args: argparse.Namespace, out: BinaryIO, err: TextIO) -> int:
    from streams.cli import FIXTURES

    config = load_config(None)
    lines = ["loopwatch demo: real OpenClaw sessions replayed through the detector core", ""]
    lines.append(f"{'trace':38} {'events':>6} {'warn':>5} {'block':>5} {'abort':>5}  first verdict")
    for path in sorted(FIXTURES.glob("*.events.jsonl")):
        engine = Engine(config)
        counts: Counter[str] = Counter()
        events = 0
        first = "-"
        with path.open("rb") as stream:
            for item in read_events(stream, str(path)):
                if isinstance(item, BadLine):
                    print(f"loopwatch: skipped invalid event at {item}", file=err)
                    continue
                events += 1
                for output in engine.process(item):
                    if isinstance(output, Verdict):
                        counts[output.action] += 1
                        label = f"{output.level} {output.detector} count {output.count}"
                    else:
                        assert isinstance(output, Abort)
                        counts["abort"] += 1
                        label = f"abort {output.reason}"
                    if first == "-":
                        first = f"{label} at {output.trigger_event_id.rsplit('-', 1)[-1]}"
        name = path.name.removesuffix(".events.jsonl")
        lines.append(
            f"{name:38} {events:>6} {counts['warn']:>5} {counts['block']:>5} {counts['abort']:>5}  {first}"
        )
    out.write(("\n".join(lines) + "\n").encode())
    out.flush()
    return 0
