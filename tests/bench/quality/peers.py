"""The shipped peer loop detectors, each run from its own package over the real-trajectory corpus.

    python -m tests.bench.quality.peers [--events PATH] [--out PATH]

(from the repository root, with the project's venv or any Python 3.11+: standard library only)
installs the peers with ``peers.sh`` (pinned, bench-only environments under ``.bench/``), runs
each peer's adapter inside its own environment, one after the other, and writes
``.bench/quality/peers.json``; on the labelled runs beside the events file
(``labels-dev.jsonl``), if there, it prints what each peer stops.

``peer_results(events_path)`` returns what is written:

    {"gemini-cli": {run_id: {"calls", "first_stop", "first_warn", "first_abort"}},
     "crewai":     {run_id: {"calls", "first_stop", "first_warn"}},
     "openhands":  {run_id: {"calls", "first_stop", "first_warn", "stuck_after_last"}},
     "versions":   {peer: "package==version"},
     "events":     the events file read}

``PEERS`` names the peer keys. Call indices are 1-based over a run's tool calls; ``first_stop`` is
the first call the peer refuses or does not let the agent make, ``first_warn`` the first call made
after a warning short of a stop (null where a peer has none). The adapters' docstrings say
precisely how each peer is fed and what each index means.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.bench.quality.corpus_runs import REPO_ROOT, default_events_path, read_runs

HERE = Path(__file__).resolve().parent
BENCH = REPO_ROOT / ".bench"
OUT_PATH = BENCH / "quality" / "peers.json"
ADAPTER_TIMEOUT_S = 1800


@dataclass(frozen=True)
class Peer:
    name: str
    package: str
    command: tuple[str, ...]  # the events path is appended


PEER_LIST = (
    Peer(
        "gemini-cli",
        "@google/gemini-cli-core",
        ("node", str(HERE / "gemini_adapter.mjs")),
    ),
    Peer(
        "crewai",
        "crewai",
        (str(BENCH / "quality-venv" / "bin" / "python"), "-m", "tests.bench.quality.crewai_adapter"),
    ),
    Peer(
        "openhands",
        "openhands-sdk",
        (
            str(BENCH / "quality-venv-openhands" / "bin" / "python"),
            "-m",
            "tests.bench.quality.openhands_adapter",
        ),
    ),
)
PEERS = tuple(peer.name for peer in PEER_LIST)


def install_peers() -> None:
    """``peers.sh``: quiet when all is installed; its own message and log tail when it fails."""
    done = subprocess.run(["bash", str(HERE / "peers.sh")], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"peers.sh failed ({done.returncode}):\n{done.stdout}{done.stderr}")


def installed_versions() -> dict[str, str]:
    node_manifest = BENCH / "quality-node" / "node_modules" / "@google" / "gemini-cli-core" / "package.json"
    versions = {"gemini-cli": f"@google/gemini-cli-core=={json.loads(node_manifest.read_text())['version']}"}
    for peer in PEER_LIST[1:]:
        version = subprocess.run(
            [
                peer.command[0],
                "-c",
                f"from importlib.metadata import version; print(version({peer.package!r}))",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        versions[peer.name] = f"{peer.package}=={version}"
    return versions


def adapter_env() -> dict[str, str]:
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "NODE_OPTIONS"}
    }
    env["PYTHONPATH"] = str(REPO_ROOT)  # the adapters import tests.bench.quality.corpus_runs
    return env


def run_adapter(peer: Peer, events_path: Path) -> dict[str, dict[str, Any]]:
    if peer.command[0] == "node" and shutil.which("node") is None:
        raise RuntimeError("node is not on PATH (needed for the Gemini CLI adapter)")
    done = subprocess.run(
        [*peer.command, str(events_path)],
        cwd=REPO_ROOT,
        env=adapter_env(),
        capture_output=True,
        text=True,
        timeout=ADAPTER_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{peer.name} adapter failed ({done.returncode}):\n{done.stderr[-4000:]}")
    runs: dict[str, dict[str, Any]] = {}
    for line in done.stdout.splitlines():
        answer = json.loads(line)
        run_id = answer.pop("run_id")
        if run_id in runs:
            raise RuntimeError(f"{peer.name} adapter answered twice for {run_id}")
        runs[run_id] = answer
    return runs


def check_answers(name: str, runs: dict[str, dict[str, Any]], calls: dict[str, int]) -> None:
    """Every run answered once, with the corpus's call count and indices within the run."""
    if runs.keys() != calls.keys():
        missing = sorted(calls.keys() - runs.keys())[:5]
        extra = sorted(runs.keys() - calls.keys())[:5]
        raise RuntimeError(f"{name}: runs differ from the corpus (missing {missing}, extra {extra})")
    for run_id, answer in runs.items():
        if answer["calls"] != calls[run_id]:
            raise RuntimeError(f"{name}: {run_id} has {answer['calls']} calls, the corpus {calls[run_id]}")
        for key in ("first_stop", "first_warn", "first_abort"):
            index = answer.get(key)
            if index is not None and not 1 <= index <= calls[run_id]:
                raise RuntimeError(f"{name}: {run_id} {key}={index} outside 1..{calls[run_id]}")


def peer_results(events_path: str | Path | None = None) -> dict[str, Any]:
    """Install the peers if needed, run each over the events file and return their answers."""
    events = Path(events_path) if events_path is not None else default_events_path()
    install_peers()
    calls = {run.run_id: len(run.calls) for run in read_runs(events)}
    results: dict[str, Any] = {}
    for peer in PEER_LIST:
        runs = run_adapter(peer, events)
        check_answers(peer.name, runs, calls)
        results[peer.name] = runs
    results["versions"] = installed_versions()
    results["events"] = str(events)
    return results


def labelled_summary(results: dict[str, Any], labels_path: Path) -> dict[str, dict[str, Any]]:
    """Per peer, on the labelled runs: loops and healthy runs stopped, and how early."""
    labels = {}
    with labels_path.open(encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                row = json.loads(line)
                labels[row["run_id"]] = row["label"]
    summary: dict[str, dict[str, Any]] = {}
    for name in PEERS:
        runs = results[name]
        loops = [run_id for run_id, label in labels.items() if label == "loop"]
        healthy = [run_id for run_id, label in labels.items() if label == "healthy"]
        stops = [runs[run_id]["first_stop"] for run_id in loops if runs[run_id]["first_stop"] is not None]
        summary[name] = {
            "loops": len(loops),
            "loops_stopped": len(stops),
            "median_first_stop": statistics.median(stops) if stops else None,
            "loops_warned": sum(1 for run_id in loops if runs[run_id]["first_warn"] is not None),
            "healthy": len(healthy),
            "healthy_stopped": sum(1 for run_id in healthy if runs[run_id]["first_stop"] is not None),
            "healthy_warned": sum(1 for run_id in healthy if runs[run_id]["first_warn"] is not None),
        }
        if name == "gemini-cli":
            aborts = [runs[run_id]["first_abort"] for run_id in loops if runs[run_id]["first_abort"]]
            summary[name]["loops_aborted"] = len(aborts)
            summary[name]["healthy_aborted"] = sum(1 for run_id in healthy if runs[run_id]["first_abort"])
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--events", type=Path, default=None, help="the corpus events (JSON lines, gzip or plain)"
    )
    parser.add_argument("--out", type=Path, default=OUT_PATH, help=f"default {OUT_PATH}")
    args = parser.parse_args(argv)
    results = peer_results(args.events)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {args.out}: {', '.join(results['versions'].values())}")
    labels_path = Path(results["events"]).parent / "labels-dev.jsonl"
    if labels_path.exists():
        for name, row in labelled_summary(results, labels_path).items():
            print(f"{name}: {json.dumps(row)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
