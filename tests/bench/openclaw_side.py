"""OpenClaw's shipped tool-loop detector as the other side of ``make bench`` (issue 24 §1).

The ``openclaw`` npm package and the Node.js it needs are the ones
``integrations/openclaw/test/real-openclaw.sh`` installs (pinned, into ``.tools/openclaw``);
:func:`locate` runs that script, so a missing install is installed and a failed install is a
failure of the bench. :class:`OpenClawSide` keeps one Node process (``openclaw_detector.mjs``)
for the whole bench: it finds the detector module by its exports, loads a workload once
(decoded and grouped by run, untimed) and answers each ``time`` request with the nanoseconds
its detector calls took (measured inside Node, so no pipe or process start is in the figure)
and the number of calls the detector flagged as stuck.

OpenClaw's logger is silenced (``OPENCLAW_LOG_LEVEL=silent``): each stuck call would otherwise
format, redact and print a line, a cost of OpenClaw's logging set-up rather than of its
detector, and one that depends on the user's OpenClaw config file.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

__all__ = ["DRIVER", "INSTALLER", "OpenClawSide", "OpenClawSideError", "Pass", "locate"]

ROOT = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).resolve().parent / "openclaw_detector.mjs"
INSTALLER = ROOT / "integrations" / "openclaw" / "test" / "real-openclaw.sh"
MARK = b"@@bench "
INSTALL_TIMEOUT_S = 900.0


class OpenClawSideError(RuntimeError):
    """OpenClaw's side could not be installed, started or driven."""


@dataclass(frozen=True)
class Pass:
    seconds: float
    stuck: int
    calls: int


def locate() -> tuple[Path, Path]:
    """``(node, openclaw package dir)``, installed by ``real-openclaw.sh`` when missing."""
    try:
        done = subprocess.run(
            ["bash", str(INSTALLER)], capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S
        )
    except subprocess.TimeoutExpired as exc:
        raise OpenClawSideError(f"{INSTALLER} did not finish in {INSTALL_TIMEOUT_S:.0f} s") from exc
    if done.returncode != 0:
        raise OpenClawSideError(f"{INSTALLER} failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}")
    lines = done.stdout.strip().splitlines()
    if len(lines) < 2:
        raise OpenClawSideError(f"{INSTALLER} printed {done.stdout!r}, not the node and openclaw.mjs paths")
    node, entry = Path(lines[-2]), Path(lines[-1])
    if not node.is_file() or not entry.is_file():
        raise OpenClawSideError(f"{INSTALLER} named {node} and {entry}, which do not exist")
    return node, entry.parent


class OpenClawSide:
    """One Node process timing OpenClaw's detector; use as a context manager."""

    def __init__(self, node: Path, package: Path) -> None:
        self.package = package
        self._stderr: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - closed by close()
        env = {**os.environ, "OPENCLAW_LOG_LEVEL": "silent"}
        self._process = subprocess.Popen(
            [str(node), str(DRIVER), str(package)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
            cwd=ROOT,
        )
        hello = self._answer()
        self.module = str(hello["module"])
        self.version = str(hello["version"])
        self.node = str(hello["node"])
        self.calls = 0

    def __enter__(self) -> OpenClawSide:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        process = self._process
        if process.stdin is not None and not process.stdin.closed:
            process.stdin.close()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()
        self._stderr.close()

    def load(self, workload: Path) -> int:
        """Read, decode and group the workload by run in Node (untimed); its number of calls."""
        answer = self._ask({"op": "load", "path": str(workload.resolve())})
        self.calls = int(answer["calls"])
        return self.calls

    def time_pass(self) -> Pass:
        """One timed pass over the loaded workload, fresh state per run."""
        answer = self._ask({"op": "time"})
        return Pass(int(answer["ns"]) / 1e9, int(answer["stuck"]), int(answer["calls"]))

    def _ask(self, command: dict[str, Any]) -> dict[str, Any]:
        stdin = self._process.stdin
        assert stdin is not None
        try:
            stdin.write(json.dumps(command).encode() + b"\n")
            stdin.flush()
        except BrokenPipeError as exc:
            raise OpenClawSideError(f"the Node driver has stopped: {self._stderr_tail()}") from exc
        return self._answer()

    def _answer(self) -> dict[str, Any]:
        stdout = self._process.stdout
        assert stdout is not None
        while True:
            line = stdout.readline()
            if not line:
                status = self._process.wait()
                raise OpenClawSideError(
                    f"the Node driver {DRIVER.name} stopped (exit {status}): {self._stderr_tail()}"
                )
            if line.startswith(MARK):  # any other line is OpenClaw's own console output
                answer: dict[str, Any] = json.loads(line[len(MARK) :])
                return answer

    def _stderr_tail(self) -> str:
        self._stderr.flush()
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace").strip()[-2000:] or "(no stderr)"
