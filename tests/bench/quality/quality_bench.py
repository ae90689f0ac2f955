"""``make bench-quality``: what loopwatch and the shipped peers stop on real agents' runs.

    python -m tests.bench.quality.quality_bench [--no-peers] [--docs]

Over the real-trajectory corpus (``tests/data/real-trajectories/``), in one run: loopwatch
with OpenClaw's rules (the product's default config), loopwatch with the agents preset, and
the shipped peers from their own pinned packages (:mod:`tests.bench.quality.peers`: Gemini
CLI's ``LoopDetectionService``, CrewAI's ``check_repeated_tool_call``, OpenHands'
``StuckDetector``). Per detector and per agent family it prints the figures of
:mod:`tests.bench.quality.scoring`, then every labelled run where the preset and the best
peer (the one that stops the most loops and no healthy run) disagree, with the label's reason.
The report goes to ``.bench/quality/report.md``; ``--docs`` also writes it into
``docs/real-loops.md`` between its result markers. ``--no-peers`` leaves the peers out (no
install).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from loopwatch.config.fleet import parse_config_text
from loopwatch.detectors.decoding import decode_event
from loopwatch.detectors.events import Event
from loopwatch.streams.history.replay import replay
from tests.bench.quality.scoring import CORPUS_DIR, Answer, Corpus, Score, load_corpus, score

REPO = Path(__file__).resolve().parents[3]
REPORT = REPO / ".bench" / "quality" / "report.md"
DOCS = REPO / "docs" / "real-loops.md"
BEGIN, END = "<!-- bench-quality:begin -->", "<!-- bench-quality:end -->"

#: the loopwatch configurations compared: the product's default (OpenClaw's rules), the preset
CONFIGS: dict[str, str] = {
    "loopwatch (OpenClaw's rules)": '{"tools": {"loopDetection": {"enabled": true}}}',
    "loopwatch (preset agents-2026-12)": '{"loopwatch": {"preset": "agents-2026-12"}}',
}
PRESET = "loopwatch (preset agents-2026-12)"


def corpus_events(path: Path) -> list[Event]:
    """The corpus's events, decoded as every door decodes them."""
    import gzip

    with gzip.open(path, "rb") as lines:
        return [decode_event(line, texts=True) for line in lines if line.strip()]


def loopwatch_answers(events: list[Event], config_text: str) -> dict[str, Answer]:
    """Per run, the call of the first warning and of the first block or abort under a config."""
    runs = replay(events, parse_config_text(config_text))
    answers: dict[str, Answer] = {}
    for run, summary in runs.items():
        stops = [index for index in (summary.first_block, summary.first_abort) if index is not None]
        answers[run] = Answer(summary.first_warning, min(stops) if stops else None)
    return answers


def peer_answers(events_path: Path) -> dict[str, dict[str, Answer]]:
    """Per peer, its answers (installs the peers on first use)."""
    from tests.bench.quality.peers import PEERS, peer_results

    results = peer_results(events_path)
    found: dict[str, dict[str, Answer]] = {}
    for peer in PEERS:
        version = results["versions"].get(peer, peer)
        found[f"{version}"] = {
            run: Answer(row.get("first_warn"), row.get("first_stop")) for run, row in results[peer].items()
        }
    return found


def _fmt(value: float | int | None) -> str:
    if value is None:
        return "–"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _row(name: str, found: Score) -> str:
    stop_by = f"{found.by_stop_by}/{found.with_stop_by}" if found.with_stop_by else "–"
    return (
        f"| {name} | {found.loops_stopped}/{found.loops} | {found.loops_warned} | "
        f"{found.healthy_stopped}/{found.healthy} | {found.healthy_warned} | "
        f"{found.resolved_stopped}/{found.resolved} | {_fmt(found.median_stop)} | "
        f"{_fmt(found.median_from_start)} | {stop_by} | {found.runs_stopped} |"
    )


HEADER = (
    "| detector | loops stopped | loops warned | healthy stopped | healthy warned only | "
    "resolved runs stopped | median first stop (call) | median calls from loop start | "
    "stopped by stop_by | runs stopped (all) |\n"
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
)


def best_peer(corpus: Corpus, detectors: Mapping[str, Mapping[str, Answer]]) -> str | None:
    """The peer that stops the most labelled loops and no healthy run."""
    best: tuple[int, str] | None = None
    for name, answers in detectors.items():
        if name.startswith("loopwatch"):
            continue
        found = score(corpus, answers)
        if found.healthy_stopped == 0 and (best is None or found.loops_stopped > best[0]):
            best = (found.loops_stopped, name)
    return None if best is None else best[1]


def disagreements(
    corpus: Corpus, preset: Mapping[str, Answer], peer: Mapping[str, Answer]
) -> list[tuple[str, str, int | None, int | None, str]]:
    """Labelled runs where exactly one of the two stops: (run, label, preset stop, peer stop, reason)."""
    rows = []
    nothing = Answer()
    for run, label in corpus.labels.items():
        mine, theirs = preset.get(run, nothing).first_stop, peer.get(run, nothing).first_stop
        if (mine is None) != (theirs is None):
            rows.append((run, label["label"], mine, theirs, label.get("reason", "")))
    return rows


def report(corpus: Corpus, detectors: Mapping[str, Mapping[str, Answer]]) -> str:
    """The whole report in Markdown."""
    today = datetime.date.today().isoformat()
    lines = [
        f"Measured {today} by `make bench-quality` on {len(corpus.calls)} runs "
        f"({len(corpus.loops)} labelled loops, {len(corpus.healthy)} labelled healthy, "
        f"{len(corpus.resolved)} runs the benchmark scored resolved).",
        "",
        HEADER,
    ]
    lines += [_row(name, score(corpus, answers)) for name, answers in detectors.items()]
    families = sorted(set(corpus.families.values()))
    for family in families:
        lines += ["", f"**{family}**", "", HEADER]
        lines += [_row(name, score(corpus, answers, family)) for name, answers in detectors.items()]
    peer = best_peer(corpus, detectors)
    if peer is not None and PRESET in detectors:
        rows = disagreements(corpus, detectors[PRESET], detectors[peer])
        lines += ["", f"Labelled runs where the preset and {peer} disagree ({len(rows)}):", ""]
        lines += [
            "| run | label | preset stops at | peer stops at | label's reason |",
            "| --- | --- | --- | --- | --- |",
        ]
        for run, label, mine, theirs, reason in rows:
            lines.append(f"| `{run}` | {label} | {_fmt(mine)} | {_fmt(theirs)} | {reason} |")
    return "\n".join(lines) + "\n"


def write_docs(text: str) -> None:
    """The report into docs/real-loops.md between its markers."""
    page = DOCS.read_text(encoding="utf-8")
    start, end = page.index(BEGIN) + len(BEGIN), page.index(END)
    DOCS.write_text(page[:start] + "\n" + text + page[end:], encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-peers", action="store_true", help="leave the shipped peers out")
    parser.add_argument("--docs", action="store_true", help="write the report into docs/real-loops.md")
    parser.add_argument("--json", type=Path, help="also write every detector's answers as JSON here")
    args = parser.parse_args(argv)
    corpus = load_corpus(CORPUS_DIR)
    events = corpus_events(corpus.events_path)
    detectors: dict[str, dict[str, Answer]] = {
        name: loopwatch_answers(events, config) for name, config in CONFIGS.items()
    }
    if not args.no_peers:
        detectors.update(peer_answers(corpus.events_path))
    text = report(corpus, detectors)
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(text, encoding="utf-8")
    if args.json is not None:
        dumped: dict[str, Any] = {
            name: {run: [a.first_warn, a.first_stop] for run, a in answers.items()}
            for name, answers in detectors.items()
        }
        args.json.write_text(json.dumps(dumped, indent=1), encoding="utf-8")
    if args.docs:
        write_docs(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
