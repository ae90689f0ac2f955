"""``loopwatch conformance``: the spec's executable vectors."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, BinaryIO, TextIO


def cmd_conformance(args: argparse.Namespace, out: BinaryIO, err: TextIO) -> int:
    from loopwatch.detectors.conformance import run_vector
    from loopwatch.detectors.stable_json import WIRE_DECODER

    passed = failed = 0
    lines_out: list[str] = []
    for path in args.files:
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            print(f"loopwatch: cannot read {path}: {exc.strerror}", file=err)
            return 2
        in_file = 0
        for number, line in enumerate(data.split(b"\n"), start=1):  # lines as `run` counts them
            if not line.strip():
                continue
            in_file += 1
            try:
                vector = WIRE_DECODER.decode(line)
            except Exception as exc:  # noqa: BLE001 - a malformed line is a failed vector
                failed += 1
                lines_out.append(f"FAIL {path}:{number}: not valid JSON: {exc}")
                continue
            name = vector.get("name") if isinstance(vector, dict) else None
            failure = run_vector(vector)
            if failure is None:
                passed += 1
            else:
                failed += 1
                label = f" {name}" if isinstance(name, str) else ""
                lines_out.append(f"FAIL {path}:{number}{label}: {failure}")
        if not in_file:
            print(f"loopwatch: {path}: no conformance vectors in it (empty file)", file=err)
    text = "\n".join([*lines_out, f"{passed} passed, {failed} failed"]) + "\n"
    out.write(text.encode())
    out.flush()
    return 1 if failed or not passed else 0


def register(sub: Any) -> None:
    conf = sub.add_parser(
        "conformance",
        help="run conformance vector files (spec §0 step vocabulary)",
        description="Runs every vector of the given JSONL files against the detector core and "
        "prints one line per failing vector (file, line, step and reason) and a total. A vector's "
        "profile picks its rules: loopwatch = OpenClaw 2026-05, loopwatch-newest = 2026-08. "
        "Exits 1 if any vector failed or a file held no vector.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  loopwatch conformance tests/data/openclaw-public.jsonl",
    )
    conf.add_argument("files", nargs="+", metavar="FILE")
    conf.set_defaults(func=cmd_conformance)
