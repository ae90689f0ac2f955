"""Running a CLI as a bounded child process: its own process group, killed whole on timeout."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["Finished", "install", "run_bounded"]


class Finished:
    """A finished (or killed) CLI run: exit code and output."""

    def __init__(
        self, args: Sequence[str], returncode: int, stdout: str, stderr: str, timed_out: bool
    ) -> None:
        self.args = list(args)
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        self.timed_out = timed_out

    def describe(self) -> str:
        state = "timed out" if self.timed_out else f"exit {self.returncode}"
        head = " ".join(self.args[:3])
        return f"{head} … ({state})\n--- stdout\n{self.stdout[-4000:]}\n--- stderr\n{self.stderr[-4000:]}"


def run_bounded(
    args: Sequence[str], *, env: Mapping[str, str], cwd: Path, timeout: float = 120.0
) -> Finished:
    """Run ``args`` with stdin closed; after ``timeout`` seconds its whole process group is killed."""
    proc = subprocess.Popen(
        list(args),
        env=dict(env),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
        return Finished(args, proc.returncode, stdout, stderr, False)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=30)
        return Finished(args, proc.returncode, stdout, stderr, True)
    finally:
        if proc.poll() is None:  # an exception while waiting: leave nothing behind
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)


def install(script: Path, timeout: float = 900.0) -> list[str]:
    """Run an install script (``codex.sh``, ``gemini.sh``); the lines it printed. Fails loudly."""
    done = subprocess.run([str(script)], capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{script.name} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return done.stdout.split()
