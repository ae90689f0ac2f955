"""The README's first screen works when pasted: its commands after ``make demo`` / ``make test``
run word for word, as a newcomer runs them in one shell, in a copy of the checkout's
``examples/`` beside the ``.venv`` that ``make demo`` made (this test's own environment).

The commands run in one bash process (the gateway started with ``&`` is stopped by the block's
own ``kill %1``), in a network namespace of their own where ``unshare`` allows it (the
gateway's port, 6070, is then free whatever else runs on this machine), and their process group
is killed at the end whatever happened."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers import ROOT

#: the README's first screen: its first this many lines
FIRST_SCREEN = 40
MARK = "@@readme-command "


def first_screen_commands() -> list[str]:
    """The command lines of the first screen's shell blocks after the one with ``make demo``."""
    screen = "\n".join((ROOT / "README.md").read_text().splitlines()[:FIRST_SCREEN])
    blocks = re.findall(r"```sh\n(.*?)```", screen, re.S)
    assert blocks, "no shell block on the README's first screen"
    assert blocks[0].splitlines()[:2] == [
        "make demo    # the embedded default: real OpenClaw traces through the core, no broker",
        "make test    # everything CI runs: lint, types, conformance vectors, unit + integration tests"
        " (compiled and pure core)",
    ], "the README's first block is the two make commands"
    commands = [line for block in blocks[1:] for line in block.splitlines() if line.strip()]
    assert len(commands) >= 4, "the first screen's tour is missing"
    return commands


def _script(commands: list[str]) -> str:
    lines = ["set -e -o pipefail"]
    for number, command in enumerate(commands):
        lines += [f"echo '{MARK}{number}'", command]
    lines.append(f"echo '{MARK}done'")
    return "\n".join(lines) + "\n"


def _private_network() -> list[str]:
    """``unshare`` into a network namespace of its own (loopback up), where the system allows."""
    unshare, ip = shutil.which("unshare"), shutil.which("ip") or "/usr/sbin/ip"
    if unshare is None or not Path(ip).exists():
        return []
    probe = subprocess.run([unshare, "-rn", ip, "link", "set", "lo", "up"], capture_output=True, timeout=30)
    if probe.returncode != 0:
        return []
    return [unshare, "-rn", "sh", "-c", f'{ip} link set lo up && exec "$@"', "sh"]


def _outputs(stdout: str) -> dict[str, str]:
    """Each command's output, by its number (``done`` once every command ran)."""
    parts = re.split(rf"^{re.escape(MARK)}(\S+)\n", stdout, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def run_first_screen(workdir: Path) -> float:
    """Runs the first screen's commands word for word in ``workdir`` (a checkout, or a copy of
    its ``examples/`` beside a ``.venv``) and checks that they caught the loop; their time."""
    commands = first_screen_commands()
    (workdir / "first-screen.sh").write_text(_script(commands))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOOPWATCH_", "VIRTUAL_ENV"))}
    env["PATH"] = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"  # the venv only through activate
    started = time.monotonic()
    process = subprocess.Popen(
        [*_private_network(), "bash", "first-screen.sh"],
        cwd=workdir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=300)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # a gateway left running, whatever happened
        process.wait()
    took = time.monotonic() - started
    outputs = _outputs(stdout)
    ran = [key for key in outputs if key != "done"]
    failed = commands[int(ran[-1])] if ran else commands[0]
    said = (
        f"exit {process.returncode} at: {failed}\n--- stdout\n{stdout[-4000:]}\n--- stderr\n{stderr[-4000:]}"
    )
    assert process.returncode == 0, said
    assert "done" in outputs, said
    assert len(ran) == len(commands)
    print(f"the README's first screen: {len(commands)} commands in {took:.1f} s")

    # the replay of the shipped event file shows the looping run blocked and aborted
    replay = next(i for i, c in enumerate(commands) if c.startswith("loopwatch replay"))
    rows = [line for line in outputs[str(replay)].splitlines() if "looping-run" in line]
    assert rows, outputs[str(replay)]
    cells = [cell.strip() for cell in re.split(r"[│|]", rows[0]) if cell.strip()]
    *_, warning, block, abort = cells
    assert warning.isdigit(), rows[0]
    assert block.isdigit(), rows[0]  # a call number: the run was blocked
    assert abort.isdigit(), rows[0]  # and aborted
    assert "healthy-run" not in outputs[str(replay)]

    # the gateway caught the loop live: the same call warned, then blocked, then the run aborted
    loop = next(i for i, c in enumerate(commands) if "/v1/decide" in c)
    decisions = re.findall(r'"decision":"(\w+)"', outputs[str(loop)])
    assert decisions == ["allow", "allow", "warn", "allow", "block", "abort"], outputs[str(loop)]
    assert "http://127.0.0.1:6070/dashboard" in stdout + stderr  # the gateway says where to look
    return took


def test_the_first_screen_runs_as_written(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    (tmp_path / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    run_first_screen(tmp_path)
