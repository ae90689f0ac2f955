"""``make bench-hooks``: what loopwatch's command hooks add to every tool call of an agent.

Claude Code, Codex and Gemini CLI run ``loopwatch hook RUNTIME`` as a process of its own for
each hook call, and a tool call runs two: before it (``PreToolUse`` / ``BeforeTool``: the call
is decided) and after it (``PostToolUse`` / ``AfterTool``: its result recorded). Each hook
command is timed here as a whole process, the console script as a runtime starts it with the
README's settings (``loopwatch hook RUNTIME``, ``LOOPWATCH_GATEWAY_URL``): from spawning it
to reaping it, the wall clock and the CPU time the kernel accounts to it.

In turns with two floors: the bare interpreter (``python -I -S -c pass``: no site-packages,
the least any Python process costs) and the interpreter as a console script starts it
(``python -c pass``: with this environment's site-packages; an editable install's import hook
is part of it). Each turn runs every command once (order rotated from turn to turn); a round
is ``--turns`` turns; the figures are the medians, over ``--rounds`` rounds, of each round's
median, and a hook's added time is the median of its differences to the bare interpreter
paired within a turn. Twice: with an embedded gateway up (``loopwatch gateway --listen
127.0.0.1:0`` with the agents preset, started here) and with it down (a port that refuses:
the hook fails open). Every call is a new one (no loop: the gateway allows it), as most calls
are; before timing, each hook is run once and its answer checked (no fail-open line with the
gateway up, the fail-open line with it down).

Issue 43's target: a hook command's median at most 40 ms wall with the gateway up, and at
most 3× the bare interpreter's start in the same run.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import platform
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

#: (runtime, hook event, tool input field names): the two hook calls of one tool call
HOOKS = [
    ("claude-code", "PreToolUse"),
    ("claude-code", "PostToolUse"),
    ("codex", "PreToolUse"),
    ("codex", "PostToolUse"),
    ("gemini", "BeforeTool"),
    ("gemini", "AfterTool"),
]
BARE = "python -I -S -c pass"
SITE = "python -c pass"
TARGET_MS = 40.0
TARGET_RATIO = 3.0


def hook_input(runtime: str, event: str, n: int) -> bytes:
    """The hook input ``runtime`` sends for ``event`` of the ``n``-th tool call (each call new)."""
    call = {"command": f"ls /tmp/bench-{n}"}
    hook: dict[str, object] = {"session_id": f"bench-{runtime}", "hook_event_name": event}
    if runtime == "gemini":
        hook.update(tool_name="run_shell_command", tool_input=call)
        if event == "AfterTool":
            hook["tool_response"] = {"llmContent": f"bench-{n}", "returnDisplay": f"bench-{n}"}
    else:
        hook.update(tool_name="Bash", tool_input=call, tool_use_id=f"toolu_{n}", turn_id="turn-1")
        if event == "PostToolUse":
            hook["tool_response"] = {"stdout": f"bench-{n}", "stderr": "", "interrupted": False}
    return json.dumps(hook).encode()


class Timed:
    """One finished process: wall and CPU seconds (the kernel's account of it), exit code."""

    def __init__(self, wall: float, cpu: float, code: int) -> None:
        self.wall, self.cpu, self.code = wall, cpu, code


def timed(argv: list[str], stdin: bytes, env: dict[str, str]) -> Timed:
    """Run ``argv`` with ``stdin`` (output thrown away), timed from spawn to reap."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
    )
    assert proc.stdin is not None
    try:
        proc.stdin.write(stdin)
        proc.stdin.close()
    except BrokenPipeError:  # (the bare interpreter does not read it)
        pass
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    return Timed(wall, usage.ru_utime + usage.ru_stime, proc.returncode)


@contextmanager
def embedded_gateway(loopwatch: str, folder: Path) -> Iterator[str]:
    """``loopwatch gateway`` (embedded, the agents preset, as the README starts it): its URL.
    Its log goes to a file (a pipe nobody reads would fill and stall it)."""
    config = folder / "loopwatch.json"
    config.write_text('{"loopwatch": {"preset": "agents"}}')
    log = folder / "gateway.log"
    with log.open("w") as sink:
        proc = subprocess.Popen(
            [loopwatch, "gateway", "--listen", "127.0.0.1:0", "--config", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=sink,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 60
        while not (found := re.search(r"gateway at (http://\S+)", log.read_text())):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"hooks bench: the loopwatch gateway did not start: {log.read_text()}")
            time.sleep(0.05)
        yield found.group(1)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


@contextmanager
def refusing_port() -> Iterator[str]:
    """A URL nothing answers at: a bound port that does not listen (connections refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


class Command:
    def __init__(self, name: str, argv: list[str], stdin: Callable[[int], bytes]) -> None:
        self.name, self.argv, self.stdin = name, argv, stdin


def commands(loopwatch: str, python: str) -> list[Command]:
    found = [
        Command(BARE, [python, "-I", "-S", "-c", "pass"], lambda n: b""),
        Command(SITE, [python, "-c", "pass"], lambda n: b""),
    ]
    for runtime, event in HOOKS:
        stdin = functools.partial(hook_input, runtime, event)
        found.append(Command(f"loopwatch hook {runtime} ({event})", [loopwatch, "hook", runtime], stdin))
    return found


def check_answers(cmds: list[Command], env: dict[str, str], up: bool) -> None:
    """Each hook once, its answer checked: asked (gateway up) or failed open (down)."""
    for command in cmds[2:]:
        done = subprocess.run(command.argv, input=command.stdin(0), capture_output=True, env=env, timeout=60)
        stderr = done.stderr.decode(errors="replace")
        failed_open = "allowing (fail open)" in stderr
        if done.returncode != 0 or failed_open == up or "Traceback" in stderr:
            raise SystemExit(f"hooks bench: {command.name} answered {done.returncode}: {stderr.strip()}")


def measure(cmds: list[Command], env: dict[str, str], rounds: int, turns: int) -> dict[str, dict[str, float]]:
    """Per command: the medians over rounds of each round's median wall and CPU (ms), and of
    the wall added to the bare interpreter's in the same turn (ms)."""

    def empty() -> dict[str, dict[str, list[float]]]:
        return {c.name: {"wall": [], "cpu": [], "added": []} for c in cmds}

    per_round, samples = empty(), empty()
    call = 1_000_000  # (each call of the bench a new one: no loop, the gateway allows it)
    for turn in range(-1, rounds * turns):  # turn -1: a warm-up, not counted
        if turn >= 0 and turn % turns == 0:
            samples = empty()
        call += 1
        order = cmds[turn % len(cmds) :] + cmds[: turn % len(cmds)] if turn >= 0 else cmds
        results = {c.name: timed(c.argv, c.stdin(call), env) for c in order}
        if turn < 0:
            continue
        for command in cmds:
            result = results[command.name]
            if result.code != 0:
                raise SystemExit(f"hooks bench: {command.name} exited {result.code}")
            sample = samples[command.name]
            sample["wall"].append(result.wall * 1000)
            sample["cpu"].append(result.cpu * 1000)
            sample["added"].append((result.wall - results[BARE].wall) * 1000)
        if turn % turns == turns - 1:
            for name, figures in samples.items():
                for key, values in figures.items():
                    per_round[name][key].append(statistics.median(values))
    return {
        name: {key: statistics.median(values) for key, values in figures.items()}
        for name, figures in per_round.items()
    }


def report(title: str, figures: dict[str, dict[str, float]], up: bool) -> list[str]:
    bare = figures[BARE]["wall"]
    lines = [
        title,
        f"  {'command':<42} {'wall ms':>8} {'cpu ms':>8} {'× bare':>7} {'added ms':>9}",
    ]
    for name, row in figures.items():
        added = "" if name == BARE else f"{row['added']:9.1f}"
        lines.append(f"  {name:<42} {row['wall']:8.1f} {row['cpu']:8.1f} {row['wall'] / bare:7.2f} {added}")
    lines.append("  per tool call (the hook before it + the hook after it):")
    for runtime in dict.fromkeys(r for r, _ in HOOKS):
        before, after = [f"loopwatch hook {r} ({e})" for r, e in HOOKS if r == runtime]
        total = figures[before]["wall"] + figures[after]["wall"]
        beyond = figures[before]["added"] + figures[after]["added"]
        lines.append(
            f"    {runtime:<12} {total:6.1f} ms wall in all, "
            f"{beyond:6.1f} ms beyond two bare interpreter starts"
        )
    if up:
        worst = max((row["wall"], name) for name, row in figures.items() if name.startswith("loopwatch hook"))
        ratio = worst[0] / bare
        met = worst[0] <= TARGET_MS and ratio <= TARGET_RATIO
        lines.append(
            f"  issue 43 (≤ {TARGET_MS:g} ms and ≤ {TARGET_RATIO:g}× bare, gateway up): slowest hook "
            f"{worst[1]} {worst[0]:.1f} ms, {ratio:.2f}× bare: {'met' if met else 'not met'}"
        )
    return lines


#: compiles the timed install's modules, each folder of the package (an editable checkout's
#: loopwatch/ links to its source folders, which compileall does not follow by itself)
_COMPILE = """
import compileall, os, loopwatch
home = os.path.dirname(loopwatch.__file__)
for name in sorted(os.listdir(home)):
    path = os.path.realpath(os.path.join(home, name))
    if os.path.isdir(path):
        compileall.compile_dir(path, quiet=1)
compileall.compile_dir(home, maxlevels=0, quiet=1)
"""


def compile_sources(python: str) -> None:
    """The timed install's bytecode written first, as pip writes a wheel's at install: a
    checkout run with PYTHONDONTWRITEBYTECODE (or never imported) would compile every module
    of every hook process."""
    subprocess.run([python, "-c", _COMPILE], check=True, env={**os.environ, "PYTHONDONTWRITEBYTECODE": ""})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.hooks_bench", description=__doc__)
    parser.add_argument("--rounds", type=int, default=5, help="rounds (default 5)")
    parser.add_argument("--turns", type=int, default=10, help="turns per round (default 10)")
    parser.add_argument(
        "--loopwatch",
        metavar="SCRIPT",
        help="the console script whose hooks are timed, e.g. of a wheel installed in a venv of its "
        "own (default: beside this Python); the gateway is this environment's",
    )
    args = parser.parse_args(argv)
    gateway = Path(sys.executable).with_name("loopwatch")
    script = Path(args.loopwatch) if args.loopwatch else gateway
    for needed in (gateway, script):
        if not needed.exists():
            raise SystemExit(f"hooks bench: no loopwatch console script at {needed} (make setup)")
    loopwatch = str(script)
    python = str(script.with_name("python")) if script.with_name("python").exists() else sys.executable
    started = datetime.datetime.now(datetime.UTC)
    load = os.getloadavg()
    print(
        f"hooks bench {started:%Y-%m-%d %H:%M} UTC: {loopwatch} ({python}), "
        f"Python {platform.python_version()}, "
        f"{os.cpu_count()} CPUs, load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
        f"{args.rounds} rounds × {args.turns} turns, medians",
        flush=True,
    )
    compile_sources(python)
    with tempfile.TemporaryDirectory(prefix="loopwatch-hooks-bench-") as folder:
        cmds = commands(loopwatch, python)
        for up in (True, False):
            state = Path(folder) / ("state-up" if up else "state-down")
            with embedded_gateway(str(gateway), Path(folder)) if up else refusing_port() as url:
                env = {**os.environ, "LOOPWATCH_GATEWAY_URL": url, "LOOPWATCH_HOOK_STATE_DIR": str(state)}
                env.pop("LOOPWATCH_GATEWAY_TOKEN", None)
                check_answers(cmds, env, up)
                figures = measure(cmds, env, args.rounds, args.turns)
            title = f"gateway up (embedded, {url})" if up else f"gateway down ({url} refuses: fail open)"
            print("\n".join(report(title, figures, up)), flush=True)
    load = os.getloadavg()
    print(f"load after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
