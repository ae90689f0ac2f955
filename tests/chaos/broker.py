"""A broker of a scenario's own (for the scenarios that restart it), from docker/kafka/broker.sh."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from tests.helpers import ROOT

__all__ = ["own_broker"]


@contextmanager
def own_broker(port: int) -> Iterator[str]:
    """A fresh single-node broker on 127.0.0.1:``port``; stopped and deleted afterwards."""
    env = dict(os.environ, KAFKA_PORT=str(port), KAFKA_CONTROLLER_PORT=str(port + 1), PYTHON=sys.executable)
    script = str(ROOT / "docker" / "kafka" / "broker.sh")
    for action in ("reset", "start"):
        done = subprocess.run([script, action], env=env, cwd=ROOT, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"broker.sh {action} on port {port} failed:\n{done.stderr[-3000:]}")
    try:
        yield f"127.0.0.1:{port}"
    finally:
        subprocess.run([script, "reset"], env=env, check=False, cwd=ROOT, capture_output=True)
        shutil.rmtree(ROOT / ".kafka" / f"run-{port}", ignore_errors=True)
