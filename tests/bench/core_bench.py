"""``make bench``: the detector core on the four workloads (µs per tool call, calls/s).

Per workload, digest and OpenClaw rule revision (2026-05 and 2026-08, timed alternately so
both see the same machine): the time to process one tool call (its ``tool_call`` and
``tool_result`` events) through :class:`detectors.engine.Engine`, with JSON decoding
included and, separately, on events decoded beforehand; median of 5 timed passes after a
warm-up pass, each pass on fresh state. The long workload runs at historySize 30, 100 and
300. Then the SHA-256 equivalence census of the benchmark specification is recomputed and
compared with its published digests, which are the 2026-05 rules'; the 2026-08 figures are
printed beside them (looping: 3 more stuck calls, each a new ``exec`` command proposed right
after 30 identical failures of the loop's command, the exec terminal tail at work).
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from loopwatch.config import DetectorSettings, FleetConfig, resolve
from loopwatch.config.settings import Digest, Revision
from loopwatch.detectors.decoding import decode_event
from loopwatch.detectors.detection import detect
from loopwatch.detectors.engine import Engine
from loopwatch.detectors.events import Event, ToolCall, ToolResult
from loopwatch.detectors.hashing import digester_for
from loopwatch.detectors.state import RunState
from loopwatch.detectors.step import prepare, record_outcome
from tests.bench.workloads import ensure, to_wire

BENCH_DIR = Path(".bench")
OPENCLAW_CALLS_PER_S = {
    "healthy": 86_700,
    "looping": 83_600,
    "large": 8_900,
    "long-h30": 82_000,
    "long-h100": 71_800,
    "long-h300": 50_400,
}
CENSUS = {  # (workload, history) -> (stuck, outcomes, verdict_digest, outcome_digest)
    ("healthy", 30): (
        0,
        50000,
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "8c36a6cb2676474943c67bcaa1aa540549e8ebd9745cd8cf6d7a4151fc522c75",
    ),
    ("looping", 30): (
        9210,
        50000,
        "fccf875a615fcd795a3c9dfdd9b6255fc0746126072da51570a8db61a49587e8",
        "3018095ac1a05c4bcd4c99a069c8289b34ea8e343085cf2d8db511f3c2ecf4ce",
    ),
    ("large", 30): (
        0,
        5000,
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "ceba6b4d29f2bd9e69a4ffa1ba8461aa364673de8dbc5773b6c6221a3835bd02",
    ),
    ("long", 30): (
        0,
        50000,
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "1e088f081522e984709668cdb20c6cee6635134ae1ebd8243158a74f03357a5c",
    ),
    ("looping", 100): (
        9210,
        50000,
        "00c5c1794ed9d7277ccc0647c0d46d0554d4c61b68ae8154c245a0f6c60b8239",
        "3018095ac1a05c4bcd4c99a069c8289b34ea8e343085cf2d8db511f3c2ecf4ce",
    ),
    ("looping", 300): (
        9210,
        50000,
        "00c5c1794ed9d7277ccc0647c0d46d0554d4c61b68ae8154c245a0f6c60b8239",
        "3018095ac1a05c4bcd4c99a069c8289b34ea8e343085cf2d8db511f3c2ecf4ce",
    ),
}


for _name in ("healthy", "large", "long"):  # the specification: as at historySize 30
    for _history in (100, 300):
        CENSUS[(_name, _history)] = CENSUS[(_name, 30)]


REVISIONS: tuple[Revision, ...] = ("2026-05", "2026-08")


def config_for(digest: Digest, history: int, revision: Revision = "2026-08") -> FleetConfig:
    block = {"enabled": True, "historySize": history}
    return FleetConfig(
        global_block=block, settings=DetectorSettings(digest=digest, openclaw_revision=revision)
    )


def median_time(run: Callable[[], None], repeats: int) -> float:
    return median_times([run], repeats)[0]


def median_times(runs: list[Callable[[], None]], repeats: int) -> list[float]:
    """Median seconds of each run, timed in turns (a, b, a, b, ...) after one warm-up each."""
    gc.collect()
    gc.freeze()  # the benchmark's own input lists are not the detector's garbage to scan
    for run in runs:
        run()  # warm-up
    times: list[list[float]] = [[] for _ in runs]
    for _ in range(repeats):
        for run, spent in zip(runs, times, strict=True):
            start = time.perf_counter()
            run()
            spent.append(time.perf_counter() - start)
    return [statistics.median(spent) for spent in times]


def with_decoding(lines: list[bytes], config: FleetConfig) -> Callable[[], None]:
    def run() -> None:
        engine = Engine(config)
        process = engine.process
        for line in lines:
            process(decode_event(line))

    return run


def without_decoding(events: list[Event], config: FleetConfig) -> Callable[[], None]:
    def run() -> None:
        engine = Engine(config)
        process = engine.process
        for event in events:
            process(event)

    return run


def time_healthy(repeats: int = 3) -> float:
    """Seconds per call on the healthy workload, XXH3, decoding included."""
    lines = to_wire(ensure(BENCH_DIR, "healthy").read_bytes())
    return median_time(with_decoding(lines, config_for("xxh3", 30)), repeats) / (len(lines) // 2)


def compiled_vs_pure(rounds: int = 3) -> None:
    """The compiled and the pure-Python core on the healthy workload, alternately."""
    import subprocess

    compiled: list[float] = []
    pure: list[float] = []
    for _ in range(rounds):
        compiled.append(time_healthy())
        done = subprocess.run(
            [sys.executable, "-m", "tests.bench.pure_core"], capture_output=True, text=True, check=True
        )
        pure.append(float(done.stdout.strip()) / 1e6)
    fast, slow = statistics.median(compiled), statistics.median(pure)
    print(
        f"healthy, xxh3, side by side ({rounds} rounds): compiled {fast * 1e6:.2f} µs/call, "
        f"pure Python {slow * 1e6:.2f} µs/call: {slow / fast:.2f}× faster compiled",
        flush=True,
    )


OWN_RULES_ON = {"runNoProgress": {"enabled": True}, "editUndo": {"enabled": True}, "loopBudget": {"usd": 5}}


def own_rules_cost(repeats: int) -> None:
    """The healthy workload with loopwatch's own rules (F3-F5) on and off, side by side."""
    lines = to_wire(ensure(BENCH_DIR, "healthy").read_bytes())
    events = [decode_event(line) for line in lines]
    off = config_for("xxh3", 30)
    on = replace(off, global_rules=OWN_RULES_ON)
    calls = len(lines) // 2
    with_json = median_times([with_decoding(lines, off), with_decoding(lines, on)], repeats)
    bare = median_times([without_decoding(events, off), without_decoding(events, on)], repeats)
    print(
        f"healthy, xxh3, own rules (runNoProgress, editUndo, loopBudget) on / off per call: "
        f"{with_json[1] / calls * 1e6:.2f} / {with_json[0] / calls * 1e6:.2f} µs = "
        f"{with_json[1] / with_json[0]:.3f}× (decoding included), "
        f"{bare[1] / bare[0]:.3f}× (pre-decoded)",
        flush=True,
    )


def census(events: list[Event], history: int, newest: bool = False) -> tuple[int, int, str, str]:
    """Observe-only replay in SHA-256 mode: every detection counted, every call recorded."""
    resolved = resolve({"enabled": True, "historySize": history}, newest)
    digester = digester_for("sha256")
    states: dict[str, RunState] = {}
    verdicts, outcomes = hashlib.sha256(), hashlib.sha256()
    stuck = recorded = 0
    for event in events:
        assert event.run_id is not None
        state = states.setdefault(event.run_id, RunState(event.run_id))
        prepared = prepare(event, digester, frozenset(), newest)  # type: ignore[arg-type]
        if isinstance(event, ToolCall):
            found = detect(state.history, event.tool, prepared.args_hash, prepared.known_poll, resolved)
            if found is not None:
                stuck += 1
                verdicts.update(
                    f"{event.tool_call_id} {found.level} {found.detector} {found.count}\n".encode()
                )
            state.history.append(
                event.tool, prepared.args_hash, event.tool_call_id, None, None, None, history
            )
        else:
            assert isinstance(event, ToolResult)
            record_outcome(state, event.tool, event.tool_call_id, None, prepared, resolved)
            recorded += 1
            outcomes.update(f"{event.tool_call_id} {prepared.args_hash} {prepared.result_hash}\n".encode())
    return stuck, recorded, verdicts.hexdigest(), outcomes.hexdigest()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workloads", default="healthy,looping,large,long")
    args = parser.parse_args(argv)
    names = args.workloads.split(",")
    rows: list[dict[str, Any]] = []
    census_ok = True
    import loopwatch.detectors.step

    core = "pure Python" if loopwatch.detectors.step.__file__.endswith(".py") else "compiled with mypyc"
    print(
        f"loopwatch core benchmark — median of {args.repeats} after warm-up, "
        f"Python {sys.version.split()[0]}, "
        f"core {core}"
    )
    print(
        f"{'workload':12} {'digest':7} {'rules':8} {'µs/call':>9} {'calls/s':>10}"
        f" {'µs/call':>9} {'calls/s':>10} {'OpenClaw calls/s':>17}"
    )
    print(f"{'':29} {'decoding included':>20} {'pre-decoded events':>21}")
    for name in names:
        lines = to_wire(ensure(BENCH_DIR, name).read_bytes())
        events = [decode_event(line) for line in lines]
        calls = len(lines) // 2
        histories = (30, 100, 300) if name == "long" else (30,)
        for history in histories:
            label = f"{name}-h{history}" if name == "long" else name
            digests: tuple[Digest, ...] = ("xxh3", "sha256")
            for digest in digests:
                configs = [config_for(digest, history, revision) for revision in REVISIONS]
                decoded = median_times([with_decoding(lines, c) for c in configs], args.repeats)
                bare = median_times([without_decoding(events, c) for c in configs], args.repeats)
                for revision, with_json, without_json in zip(REVISIONS, decoded, bare, strict=True):
                    per_call, per_call_bare = with_json / calls, without_json / calls
                    rows.append(
                        {
                            "workload": label,
                            "digest": digest,
                            "revision": revision,
                            "us_per_call": per_call * 1e6,
                            "calls_per_s": 1 / per_call,
                            "us_per_call_predecoded": per_call_bare * 1e6,
                            "calls_per_s_predecoded": 1 / per_call_bare,
                        }
                    )
                    anchor = OPENCLAW_CALLS_PER_S.get(label, 0)
                    print(
                        f"{label:12} {digest:7} {revision:8} {per_call * 1e6:9.2f} {1 / per_call:10,.0f}"
                        f" {per_call_bare * 1e6:9.2f} {1 / per_call_bare:10,.0f} {anchor:17,}",
                        flush=True,
                    )
        for census_name, census_history in sorted(key for key in CENSUS if key[0] == name):
            got = census(events, census_history)
            ok = got == CENSUS[(census_name, census_history)]
            census_ok &= ok
            newest = census(events, census_history, newest=True)
            same = "the same" if newest == got else f"stuck {newest[0]}, outcome digest {newest[3][:16]}…"
            print(
                f"  census {name} h{census_history}: stuck {got[0]}, outcomes {got[1]}, "
                f"verdict_digest {got[2][:16]}…, outcome_digest {got[3][:16]}… "
                f"{'matches' if ok else 'DIFFERS from'} the specification (2026-05 rules); "
                f"2026-08 rules: {same}",
                flush=True,
            )
    by_key = {(r["workload"], r["digest"], r["revision"]): r for r in rows}
    for workload in sorted({r["workload"] for r in rows}):
        for digest in ("xxh3", "sha256"):
            old, new = by_key.get((workload, digest, "2026-05")), by_key.get((workload, digest, "2026-08"))
            if old and new:
                print(
                    f"{workload}, {digest}: 2026-08 / 2026-05 per call = "
                    f"{new['us_per_call'] / old['us_per_call']:.3f}× (decoding included), "
                    f"{new['us_per_call_predecoded'] / old['us_per_call_predecoded']:.3f}× (pre-decoded)"
                )
    for digest in ("xxh3", "sha256"):
        for revision in REVISIONS:
            long300, long30 = (
                by_key.get(("long-h300", digest, revision)),
                by_key.get(("long-h30", digest, revision)),
            )
            if long300 and long30:
                ratio = long300["us_per_call"] / long30["us_per_call"]
                print(
                    f"long workload, {digest}, {revision}: cost at historySize 300 / 30 = {ratio:.2f}× "
                    "(OpenClaw: 1.63×)"
                )
    if "healthy" in names:
        own_rules_cost(args.repeats)
    if core != "pure Python" and "healthy" in names:
        compiled_vs_pure()
    BENCH_DIR.mkdir(exist_ok=True)
    (BENCH_DIR / "core-results.json").write_text(json.dumps(rows, indent=1))
    print("OpenClaw calls/s: published figures of its own detector on this machine kind (objects in memory).")
    return 0 if census_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
