"""What the CLI runners (``codex_cli.py``, ``gemini_cli.py``) share: installing a pinned CLI,
running it headless (:class:`Cli`) as a bounded child process (its own process group, killed
whole on timeout) with an environment of its own, the command hooks of its settings, and its
JSONL output (:class:`CliRun`)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

__all__ = ["Cli", "CliRun", "Finished", "child_env", "command_hooks", "install", "run_bounded"]


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

    def assert_succeeded(self) -> None:
        """The run ended by itself, with exit code 0."""
        assert not self.timed_out, self.describe()
        assert self.returncode == 0, self.describe()


@dataclass
class CliRun:
    """One CLI run: the process, the CLI's own folder in the run's ``HOME``, and its JSONL events."""

    finished: Finished
    home: Path

    @property
    def events(self) -> list[dict[str, Any]]:
        events = []
        for line in self.finished.stdout.splitlines():
            if line.startswith("{"):
                event = json.loads(line)
                if isinstance(event, dict):
                    events.append(event)
        return events


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


def child_env(
    settings: Mapping[str, str], *, drop_prefixes: tuple[str, ...], drop: Iterable[str] = ()
) -> dict[str, str]:
    """This process's environment without the variables of ``drop_prefixes`` and ``drop`` (the
    CLI's own, which would reach past the test's settings), then ``settings``."""
    dropped = set(drop)
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(drop_prefixes) and key not in dropped
    }
    return {**env, **settings}


def command_hooks(
    hooks: Mapping[str, Sequence[str]], *, matcher: str, timeout: int
) -> dict[str, list[dict[str, Any]]]:
    """The ``hooks`` of a CLI's settings (Claude Code's shape, which Codex and Gemini CLI share):
    event name (``PreToolUse``, ``BeforeTool``, ...) to one group that runs its commands, in order."""
    return {
        event: [
            {
                "matcher": matcher,
                "hooks": [
                    {"type": "command", "command": command, "timeout": timeout} for command in commands
                ],
            }
        ]
        for event, commands in hooks.items()
    }


RunT = TypeVar("RunT", bound=CliRun)


class Cli(ABC, Generic[RunT]):
    """A CLI run headless against a model at ``base_url``: each CLI says where its settings go,
    which variables it reads and how it is called."""

    own_env_prefixes: ClassVar[tuple[str, ...]]  # the CLI's variables: not inherited from the test
    own_env_names: ClassVar[tuple[str, ...]] = ()

    @abstractmethod
    def configure(self, home: Path, base_url: str, hooks: Mapping[str, Sequence[str]] | None) -> Path:
        """Write the CLI's settings under ``home``; the CLI's own folder there."""

    @abstractmethod
    def environment(self, home: Path, cli_home: Path, base_url: str) -> dict[str, str]: ...

    @abstractmethod
    def arguments(self, workdir: Path, prompt: str, extra_args: Sequence[str]) -> list[str]: ...

    @abstractmethod
    def finished_run(self, finished: Finished, cli_home: Path) -> RunT: ...

    def run(
        self,
        *,
        home: Path,
        workdir: Path,
        base_url: str,
        prompt: str,
        hooks: Mapping[str, Sequence[str]] | None = None,
        env: Mapping[str, str] | None = None,
        extra_args: Sequence[str] = (),
        timeout: float = 120.0,
    ) -> RunT:
        """One headless run in ``workdir`` with ``home`` as ``HOME``, the model at ``base_url``,
        ``hooks`` (event name to the commands it runs) and ``env`` on top of the CLI's variables."""
        home.mkdir(parents=True, exist_ok=True)
        workdir.mkdir(parents=True, exist_ok=True)
        cli_home = self.configure(home, base_url, hooks)
        settings = {**self.environment(home, cli_home, base_url), **(env or {})}
        child = child_env(settings, drop_prefixes=self.own_env_prefixes, drop=self.own_env_names)
        finished = run_bounded(
            self.arguments(workdir, prompt, extra_args), env=child, cwd=workdir, timeout=timeout
        )
        return self.finished_run(finished, cli_home)

    def run_in(
        self,
        folder: Path,
        *,
        base_url: str,
        prompt: str,
        hooks: Mapping[str, Sequence[str]] | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float = 120.0,
    ) -> RunT:
        """``run`` with ``HOME`` and the working folder under ``folder`` (``home``, ``work``),
        which must end by itself with exit code 0."""
        run = self.run(
            home=folder / "home",
            workdir=folder / "work",
            base_url=base_url,
            prompt=prompt,
            hooks=hooks,
            env=env,
            timeout=timeout,
        )
        run.finished.assert_succeeded()
        return run
