"""The Node process around OpenClaw's shipped detector (``openclaw_oracle.mjs``).

The package and the Node.js it needs are the ones ``integrations/openclaw/test/real-openclaw.sh``
installs (pinned, into ``.tools/openclaw``; installed on first use, so no npm means a failure,
never a skip). One process serves a whole fleet: :meth:`OpenClawOracle.exchange` writes a batch
of NDJSON lines from one thread and reads the same number of answers from another, so neither
pipe can fill up while the caller computes loopwatch's side of the same batch.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import IO, Any

from tests.helpers import ROOT

__all__ = ["DRIVER", "INSTALLER", "TIMEOUT_S", "OpenClawOracle", "Pending", "locate_openclaw"]

DRIVER = Path(__file__).resolve().parent / "openclaw_oracle.mjs"
INSTALLER = ROOT / "integrations" / "openclaw" / "test" / "real-openclaw.sh"
TIMEOUT_S = 300.0  # the longest a batch's answers may take


def locate_openclaw() -> tuple[Path, Path]:
    """``(node, openclaw package dir)``, installing them the first time."""
    done = subprocess.run(["bash", str(INSTALLER)], capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"{INSTALLER.name} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    lines = done.stdout.strip().splitlines()
    node, entry = Path(lines[-2]), Path(lines[-1])
    return node, entry.parent


class Pending:
    """Answers of one batch on their way; :meth:`result` waits for them."""

    def __init__(self, oracle: OpenClawOracle, lines: list[bytes]) -> None:
        self._answers: list[bytes] = []
        self._error: BaseException | None = None
        stdin, stdout = oracle.pipes()
        self._writer = threading.Thread(target=self._write, args=(stdin, lines), daemon=True)
        self._reader = threading.Thread(target=self._read, args=(stdout, len(lines)), daemon=True)
        self._writer.start()
        self._reader.start()
        self._oracle = oracle

    def _write(self, stdin: IO[bytes], lines: list[bytes]) -> None:
        try:
            chunk: list[bytes] = []
            size = 0
            for line in lines:
                chunk.append(line)
                size += len(line)
                if size > 1 << 20:
                    stdin.write(b"".join(chunk))
                    chunk, size = [], 0
            stdin.write(b"".join(chunk))
            stdin.flush()
        except BaseException as exc:  # noqa: BLE001 - re-raised by result()
            self._error = exc

    def _read(self, stdout: IO[bytes], count: int) -> None:
        answers = self._answers
        try:
            for _ in range(count):
                line = stdout.readline()
                if not line:
                    raise RuntimeError("the OpenClaw oracle stopped answering")
                answers.append(line)
        except BaseException as exc:  # noqa: BLE001 - re-raised by result()
            self._error = exc

    def result(self, timeout: float = TIMEOUT_S) -> list[dict[str, Any]]:
        self._reader.join(timeout)
        if self._reader.is_alive():  # a hung oracle: stop it, so the threads end too
            self._oracle.kill()
            self._reader.join(10)
            raise RuntimeError(
                f"the OpenClaw oracle gave no answer in {timeout} s: {self._oracle.stderr_tail()}"
            )
        self._writer.join(10)
        if self._error is not None:
            raise RuntimeError(f"{self._error}; oracle stderr: {self._oracle.stderr_tail()}") from self._error
        return [json.loads(line) for line in self._answers]


class OpenClawOracle:
    """One ``node openclaw_oracle.mjs`` process (or another ``driver`` of the same protocol:
    NDJSON lines in, one answer line each out); close it with :meth:`close`."""

    def __init__(self, node: Path, package: Path, driver: Path = DRIVER) -> None:
        self._home = tempfile.TemporaryDirectory(prefix="openclaw-oracle-")
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": self._home.name,  # nothing of OpenClaw's reads or writes the real home
            "OPENCLAW_LOG_LEVEL": "silent",  # its loggers would write /tmp/openclaw/*.log
            "NO_COLOR": "1",
        }
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - open while the process lives
        self._proc = subprocess.Popen(
            [str(node), str(driver), str(package)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
            cwd=self._home.name,
        )

    def pipes(self) -> tuple[IO[bytes], IO[bytes]]:
        stdin, stdout = self._proc.stdin, self._proc.stdout
        assert stdin is not None
        assert stdout is not None
        return stdin, stdout

    def submit(self, lines: list[bytes]) -> Pending:
        """Send a batch (each line ends with a newline); its answers come in the same order."""
        return Pending(self, lines)

    def exchange(self, lines: list[bytes]) -> list[dict[str, Any]]:
        return self.submit(lines).result()

    def stderr_tail(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode("utf-8", "replace")[-2000:]

    def kill(self) -> None:
        self._proc.kill()

    def close(self) -> None:
        stdin = self._proc.stdin
        if stdin is not None and not stdin.closed:
            stdin.close()
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(5)
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        self._stderr.close()
        self._home.cleanup()
