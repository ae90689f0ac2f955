"""The agents preset's verdicts on the whole real-trajectory corpus, kept as a golden file.

    python -m tests.bench.quality.golden --write   # after a deliberate change of the preset

Every output (verdict or abort) of the embedded engine replaying the corpus under
``{"loopwatch": {"preset": "agents-2026-12"}}``, in order, as its wire JSON, one per line
(``tests/data/real-trajectories/preset-verdicts.jsonl.gz``). ``tests/unit/test_real_loops_golden.py``
replays the corpus again and compares output for output, so a change to the house that moves
one verdict of the pinned preset is seen. A deliberate change of the rules is a new dated
preset, not a new golden file for the old one.
"""

from __future__ import annotations

import argparse
import gzip
from pathlib import Path

import msgspec

from loopwatch.config.fleet import parse_config_text
from loopwatch.detectors.engine import Engine
from loopwatch.detectors.events import Output
from tests.bench.quality.quality_bench import corpus_events
from tests.bench.quality.scoring import CORPUS_DIR

__all__ = ["GOLDEN", "PINNED", "preset_outputs", "read_golden"]

GOLDEN = CORPUS_DIR / "preset-verdicts.jsonl.gz"
PINNED = '{"loopwatch": {"preset": "agents-2026-12"}}'
_ENCODER = msgspec.json.Encoder(order="deterministic")


def preset_outputs(events_path: Path = CORPUS_DIR / "events.jsonl.gz") -> list[bytes]:
    """Every output of the pinned preset on the corpus, as wire JSON, in order."""
    engine = Engine(parse_config_text(PINNED))
    found: list[bytes] = []
    for event in corpus_events(events_path):
        outputs: list[Output] = engine.process(event)
        found += [_ENCODER.encode(output) for output in outputs]
    return found


def read_golden(path: Path = GOLDEN) -> list[bytes]:
    with gzip.open(path, "rb") as lines:
        return [line.rstrip(b"\n") for line in lines if line.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="write the golden file anew")
    args = parser.parse_args(argv)
    outputs = preset_outputs()
    if args.write:
        with gzip.GzipFile(GOLDEN, "wb", mtime=0) as out:
            out.write(b"".join(line + b"\n" for line in outputs))
        print(f"wrote {len(outputs)} outputs to {GOLDEN}")
        return 0
    golden = read_golden()
    same = golden == outputs
    print(f"{len(outputs)} outputs, golden {len(golden)}: {'same' if same else 'DIFFERENT'}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
