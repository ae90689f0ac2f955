"""A number beyond a double in a command hook's input follows the number rule
(docs/wire-numbers.md): accepted, and hashed as OpenClaw hashes it ({"x": 1e400} and
{"x": "Infinity"} are one call), not refused by the gateway and let through unchecked."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from tests.helpers import ROOT


def _hook(gateway: str, tool_input: bytes, state: Path) -> subprocess.CompletedProcess[bytes]:
    head = json.dumps(
        {"hook_event_name": "PreToolUse", "session_id": "numbers", "tool_name": "Bash", "tool_use_id": "t"}
    ).encode()
    stdin = head[:-1] + b', "tool_input": ' + tool_input + b"}"
    env = {**os.environ, "LOOPWATCH_HOOK_STATE_DIR": str(state)}
    command = [
        sys.executable,
        "-m",
        "loopwatch",
        "hook",
        "claude-code",
        "--gateway",
        gateway,
        "--fail-closed",
    ]
    return subprocess.run(command, input=stdin, capture_output=True, timeout=60, env=env, cwd=ROOT)


def test_a_number_beyond_a_double_is_one_call_with_its_infinity_string(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "loopwatch",
            "gateway",
            "--listen",
            "127.0.0.1:0",
            "--config",
            "examples/loopwatch.json",
        ],
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert proc.stderr is not None
        found = re.search(r"gateway at (http://\S+)", proc.stderr.readline())
        assert found
        answers = [
            _hook(found.group(1), value, tmp_path)
            for value in (b'{"x": 1e400}', b'{"x": 1e400}', b'{"x": "Infinity"}')
        ]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)
        if proc.stderr is not None:
            proc.stderr.close()
    for done in answers:
        assert done.returncode == 0, done.stderr
        assert b"allowing" not in done.stderr  # checked by the gateway, not let through unchecked
    assert answers[0].stdout.strip() == answers[1].stdout.strip() == b""
    # the third identical call (the agents preset's sameCallStreak warns at 3): one call, three times
    assert b"loopwatch warning: Bash was called 3 times in a row" in answers[2].stdout
