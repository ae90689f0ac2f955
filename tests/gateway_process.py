"""A real ``loopwatch gateway`` process for a test: started on a free port, its URL read from
its first line, stopped (its whole process group) when the test is done."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from tests.helpers import ROOT

__all__ = ["GatewayProcess", "gateway_process"]


@dataclass
class GatewayProcess:
    proc: subprocess.Popen[str]
    url: str


@contextmanager
def gateway_process(*args: str, env: dict[str, str] | None = None) -> Iterator[GatewayProcess]:
    """``loopwatch gateway --listen 127.0.0.1:0 ARGS`` (``env``: added to this one's)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "loopwatch", "gateway", "--listen", "127.0.0.1:0", *args],
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        start_new_session=True,
    )
    assert proc.stderr is not None
    try:
        found = re.search(r"gateway at (http://\S+)", proc.stderr.readline())
        assert found, "the loopwatch gateway did not start"
        yield GatewayProcess(proc, found.group(1))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        proc.stderr.close()
