"""An earlier release of loopwatch, checked out and compiled beside this tree.

``release_tree(ref)`` checks ``ref`` out into a git worktree under ``.bench/`` (once) and
compiles its core in place with mypyc; a process started with ``PYTHONPATH`` set to the
returned folder (and that folder as its working directory) runs that release. Used to time
the core against an earlier commit (``tests/bench/before_after.py``) and to run a worker of
the previous release beside this tree's (the ``rolling-upgrade`` fault scenario).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

__all__ = ["PREVIOUS_RELEASE", "ROOT", "release_env", "release_tree"]

ROOT = Path(__file__).resolve().parents[1]

#: The release before this one (0.1.x: the main branch as last deployed, before run states
#: took their compact form 2). Rolling upgrades are tested from it. Tag ``v0.1.0`` (55edc0a)
#: is older still: its snapshots are a test fixture (tests/data/snapshots).
PREVIOUS_RELEASE = "17ffdfb"


def release_tree(ref: str) -> Path:
    """A worktree of ``ref`` with its core compiled in place (kept under the commit ``ref``
    names now: ``HEAD`` or a branch moves, a worktree named after it would be stale)."""
    commit = subprocess.run(
        ["git", "rev-parse", "--verify", "--short=12", f"{ref}^{{commit}}"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    tree = ROOT / ".bench" / f"ref-{commit}"
    if not (tree / ".compiled").exists():
        if not tree.exists():
            tree.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(["git", "worktree", "prune"], cwd=ROOT, check=True)
            subprocess.run(
                ["git", "worktree", "add", "-f", "--detach", str(tree), commit], cwd=ROOT, check=True
            )
        subprocess.run(
            [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
            cwd=tree,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        (tree / ".compiled").touch()
    return tree


def release_env(tree: Path, env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) for a process that runs the release in ``tree``."""
    out = dict(os.environ if env is None else env)
    out["PYTHONPATH"] = str(tree)
    out.pop("LOOPWATCH_PURE_PYTHON", None)
    return out
