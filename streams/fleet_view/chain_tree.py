"""The tree of a delegation chain's runs, as rows for the dashboard (spec BEYOND-OPENCLAW F6).

Pure. Given the runs of one chain that a view knows (each with its ``parent_run_id``, fixed
by the run's first event) it lays them out depth first: the root, then each run's children
ordered by when they were first seen (then by id). The links come from the events, so
anything may be wrong with them, and the layout still holds every known run exactly once and
always ends:

* the root not seen (expired, or older than the view): a placeholder row stands for it, and
  the runs that name it as their parent hang below it as usual;
* a run whose parent was never seen (or is gone from the view): below the root, marked
  ``parent_not_seen``, with its own subtree;
* runs whose parents lead round in a circle, a run that names itself as its parent included:
  below the root, marked ``cycle``, starting at the first seen run of the circle.

The walk is iterative (a chain may be thousands of runs deep) and each run is laid out once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

__all__ = ["CYCLE", "PARENT_NOT_SEEN", "ROOT_NOT_SEEN", "ChainRow", "chain_layout"]

ROOT_NOT_SEEN = "root_not_seen"
PARENT_NOT_SEEN = "parent_not_seen"
CYCLE = "cycle"


class ChainRow(NamedTuple):
    run: str
    level: int  # how far below the root it is drawn (not the depth the run declared)
    note: str | None  # None, ROOT_NOT_SEEN, PARENT_NOT_SEEN or CYCLE
    children: int  # runs drawn directly below it


def chain_layout(root: str, parents: Mapping[str, str | None], first_ms: Mapping[str, int]) -> list[ChainRow]:
    """Every run of ``parents`` (run -> its parent, ``None`` for a root) and the root, depth
    first, the root's row first; ``first_ms`` orders siblings (run ids break ties)."""

    def order(run: str) -> tuple[int, str]:
        return first_ms.get(run, 0), run

    children: dict[str, list[str]] = {}
    loose: list[str] = []  # runs whose parent is not in the chain
    for run, parent in parents.items():
        if run == root:
            continue  # the root is drawn first, whatever its own parent
        if parent is None or (parent != root and parent not in parents):
            loose.append(run)
        elif parent != run:
            children.setdefault(parent, []).append(run)
        # a run that is its own parent is left to the cycle pass
    for siblings in children.values():
        siblings.sort(key=order)
    loose.sort(key=order)

    rows: list[ChainRow] = []
    placed: set[str] = {root}

    def walk(top: str, level: int, note: str | None) -> None:
        stack = [(top, level, note)]
        while stack:
            run, depth, why = stack.pop()
            below = [child for child in children.get(run, ()) if child not in placed]
            placed.update(below)
            rows.append(ChainRow(run, depth, why, len(below)))
            stack.extend((child, depth + 1, None) for child in reversed(below))

    walk(root, 0, None if root in parents else ROOT_NOT_SEEN)
    tops = [run for run in loose if run not in placed]
    placed.update(tops)
    for run in tops:
        rows[0] = rows[0]._replace(children=rows[0].children + 1)
        walk(run, 1, PARENT_NOT_SEEN)
    # what is left hangs off a circle of parents: each circle is drawn from its first seen run
    starts: list[str] = []
    explored = set(placed)
    for run in sorted((r for r in parents if r not in placed), key=order):
        path: dict[str, None] = {}
        step: str | None = run
        while step is not None and step not in path and step not in explored:
            path[step] = None
            step = parents.get(step)
        if step is not None and step in path:  # a circle not met before
            circle = list(path)[list(path).index(step) :]
            starts.append(min(circle, key=order))
        explored.update(path)
    for start in sorted(starts, key=order):
        placed.add(start)
        rows[0] = rows[0]._replace(children=rows[0].children + 1)
        walk(start, 1, CYCLE)
    return rows
