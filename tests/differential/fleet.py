"""Seeded random fleets for the differential test: runs in every loop shape of the detectors.

A :class:`Run` is one agent run: its ``tools.loopDetection`` block and its steps, each a tool
call (``op: "call"``) or a tool outcome (``op: "outcome"``, with ``result``, ``error`` (the
message of a thrown ``Error``) or ``errorValue`` (a non-string value thrown as it is)). A run
is built from segments (:data:`SEGMENTS`), each one loop shape or healthy noise:

* ``repeat``: one call over and over, identical outcomes, sometimes progress (generic repeat);
* ``poll``: ``command_status`` and ``process`` poll/log, with and without progress (known polls);
* ``pingpong``: two call patterns alternating, with stable or drifting outcomes;
* ``unknown``: a missing tool retried ("Unknown tool: x", "Tool x not found", ...);
* ``exec``: terminal ``exec`` failures whose text drifts (timestamps, durations, pids,
  counters), across changing commands, among successes, timeouts and exit footers;
* ``churn``: a few argument variants cycling to the same no-op write or error;
* ``sends``: deliveries whose receipts differ only in volatile ids;
* ``breaker``: 31+ identical no-progress outcomes (the global circuit breaker);
* ``veto``: outcomes shaped as OpenClaw's own loop veto (a recorded, blocked history);
* ``noise``: healthy calls, every outcome different;
* ``calls``: other non-poll shapes (``process`` actions, no-op writes);
* ``error_cycle``: argument variants of one tool all answered by one error (churn, and with
  it the liveness signal on poll and ping-pong warnings);
* ``marathon``: many shapes back to back in one long run (the window trimmed throughout).

Outcomes come right after their call, later (out of order, several calls open), or never (a
pending call); call ids are unique, missing, or missing on the outcome only. Payloads mix
ASCII, unicode (astral characters, combining marks, control characters, U+2028), keys whose
UTF-16 and code-point orders differ, large strings and edge-case numbers (written as raw JSON
number text: ``1e400``, ``-0.0``, ``12345678901234567890``, ...).

Ingredients of known differences (see the allow-list of ``test_openclaw_oracle.py``) are only
mixed in by :data:`INGREDIENTS`, each at a small rate, so every run that holds one is tagged.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "INGREDIENTS",
    "NUMBER_MARK",
    "SEGMENTS",
    "Run",
    "RunBuilder",
    "Step",
    "make_fleet",
    "make_run",
    "number",
]

Step = dict[str, Any]

#: A string ``NUMBER_MARK + text + NUMBER_MARK`` is written as the raw JSON number ``text``.
NUMBER_MARK = "\ue000"
EDGE_NUMBERS = (
    "1e400",
    "-1e400",
    "1e-400",
    "12345678901234567890",
    "9007199254740993",
    "1.0",
    "-0.0",
    "0.1",
    "1e21",
    "1e-7",
    "5e-324",
    "1.7976931348623157e308",
    "100e-2",
    "2.50",
    "-3",
)


def number(text: str) -> str:
    """A JSON number written as ``text`` (see :data:`NUMBER_MARK`)."""
    return f"{NUMBER_MARK}{text}{NUMBER_MARK}"


@dataclass
class Run:
    """One run of the fleet: its ``loopDetection`` block, steps and what went into it."""

    name: str
    config: dict[str, Any]
    steps: list[Step]
    segments: list[str] = field(default_factory=list)
    ingredients: list[str] = field(default_factory=list)

    @property
    def calls(self) -> int:
        return sum(1 for step in self.steps if step["op"] == "call")

    def with_steps(self, steps: list[Step], suffix: str = "") -> Run:
        return Run(self.name + suffix, self.config, steps, self.segments, self.ingredients)


WORDS = [
    *("alpha", "beta", "gamma", "delta", "src", "lib", "test", "build", "deploy", "config"),
    *("cache", "index", "main", "util", "api", "server", "client", "db", "migrate", "report"),
    *("query", "users", "orders", "invoice", "log", "tmp", "data", "docs"),
]
UNICODE = (
    "naïve café",
    "日本語のテキスト",
    "😀🚀 emoji",
    "e\u0301 combining",
    "\u202eright-to-left",
    "ctrl \x00\x01\x1f\x7f",
    "line\u2028sep\u2029para",
    "\ufeffbom",
    'quote " and \\ backslash',
    "tab\tnew\nline\r",
    "Ωmega ß ſ K",
    "\U0001f600\U00010000astral",
    "\uffff last BMP",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
)
#: white space (or not) at the ends of texts that are trimmed: JavaScript's trim() strips
#: U+0085? no; U+180E? no; U+200B? no; U+3000, U+FEFF, U+00A0, U+2028: yes; \x1c-\x1f: no
EDGE_SPACE = (
    "\u0085",
    "\u180e",
    "\u200b",
    "\u3000",
    "\ufeff",
    "\x1c",
    "\x1f",
    "\u00a0",
    "\u2028",
    "\t",
    "\x0b",
    " ",
)
#: keys whose UTF-16 order differs from their code-point order
ODD_KEYS = ("\uffff", "\U0001f600", "\ue001", "z", "Z", "", "_", "10", "2", "é")
NOISE_TOOLS = (
    "read",
    "write",
    "edit",
    "exec",
    "web_search",
    "web_fetch",
    "browser",
    "grep",
    "glob",
    "ls",
    "memory_search",
    "image",
    "canvas",
    "nodes",
    "cron",
    "sessions_list",
    "apply_patch",
    "mcp__github__list_issues",
    "plugin.tool-x",
    "Read",
    "telegram",
    "工具",
    "READ",
    "read ",
)


class RunBuilder:
    """Appends calls and their outcomes; outcomes may be held back and answered later."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.steps: list[Step] = []
        self._held: list[Step] = []
        self._next_id = 0
        self.reuse_ids = rng.random() < 0.1  # some providers number calls per turn: ids repeat

    def call(
        self,
        tool: str,
        params: Any,
        outcome: tuple[str, Any] | None,
        *,
        hold: float = 0.04,
        never: float = 0.01,
    ) -> None:
        """A call and its outcome (``("result"|"error"|"errorValue", value)``, ``None``: no
        outcome); the outcome is held back with probability ``hold``, dropped with ``never``."""
        rng = self.rng
        self._next_id += 1
        mode = rng.random()
        call_id: str | None = f"call_{self._next_id % 3}" if self.reuse_ids else f"c{self._next_id}"
        out_id = call_id
        if mode < 0.03:
            call_id = out_id = None
        elif mode < 0.05:
            out_id = None
        elif mode < 0.055:
            out_id = f"x{self._next_id}"  # an outcome no call claims: appended on its own
        self.steps.append({"op": "call", "tool": tool, "params": params, "id": call_id})
        if self._held and rng.random() < 0.3:
            self.release(rng.randint(1, len(self._held)))
        if outcome is None or rng.random() < never:
            return
        step: Step = {"op": "outcome", "tool": tool, "params": params, "id": out_id, outcome[0]: outcome[1]}
        if rng.random() < 0.004:  # the runtime hashed the outcome with rewritten params
            step["params"] = {"rewritten": params}
        if rng.random() < hold:
            self._held.append(step)
        else:
            self.steps.append(step)

    def outcome_only(self, tool: str, params: Any, outcome: tuple[str, Any]) -> None:
        self.steps.append(
            {"op": "outcome", "tool": tool, "params": params, "id": None, outcome[0]: outcome[1]}
        )

    def release(self, count: int | None = None) -> None:
        """Answer held outcomes (all, or ``count`` of them), in a shuffled order."""
        held = self._held
        self.rng.shuffle(held)
        count = len(held) if count is None else count
        self.steps.extend(held[:count])
        del held[:count]


# -- payloads ---------------------------------------------------------------------------------


def _text(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.7:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6)))
    if roll < 0.995:
        return rng.choice(UNICODE) + " " + rng.choice(WORDS)
    return rng.choice(WORDS) * rng.randint(2_000, 30_000)  # large: up to ~200 KB


def _scalar(rng: random.Random) -> Any:
    roll = rng.random()
    if roll < 0.4:
        return _text(rng)
    if roll < 0.6:
        return rng.randint(-5, 10_000)
    if roll < 0.7:
        return rng.choice((True, False, None))
    if roll < 0.85:
        return round(rng.uniform(-100, 100), rng.randint(0, 4))
    return number(rng.choice(EDGE_NUMBERS))


def _value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth >= 3 or roll < 0.6:
        return _scalar(rng)
    if roll < 0.8:
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return _object(rng, depth + 1)


def _object(rng: random.Random, depth: int = 0) -> dict[str, Any]:
    keys = [
        rng.choice(ODD_KEYS) if rng.random() < 0.15 else rng.choice(WORDS) for _ in range(rng.randint(0, 4))
    ]
    return {key: _value(rng, depth) for key in keys}


def _params(rng: random.Random, tool: str) -> Any:
    roll = rng.random()
    if roll < 0.03:
        return rng.choice(("a string", 42, None, True, [1, "two"], number(rng.choice(EDGE_NUMBERS))))
    base: dict[str, Any]
    if tool in ("read", "write", "edit", "Read"):
        base = {"path": f"/work/{rng.choice(WORDS)}/{rng.choice(WORDS)}.py"}
    elif tool == "exec":
        base = {"command": f"{rng.choice(('make', 'npm test', 'pytest', 'cargo build'))} {rng.choice(WORDS)}"}
    elif tool in ("web_search", "memory_search", "grep", "glob"):
        base = {"query": _text(rng)}
    elif tool == "web_fetch":
        base = {"url": f"https://example.com/{rng.choice(WORDS)}"}
    else:
        base = {}
    if roll < 0.5:
        base.update(_object(rng))
    return base


def _edges(rng: random.Random, text: str) -> str:
    """``text``, sometimes with white space (or what only looks like it) at its ends."""
    if rng.random() < 0.08:
        return rng.choice(EDGE_SPACE) + text + rng.choice(EDGE_SPACE)
    return text


def _text_result(text: str, details: Any = None, rng: random.Random | None = None) -> Any:
    result: dict[str, Any] = {"content": [{"type": "text", "text": text}]}
    if details is not None:
        result["details"] = details
    if rng is not None:
        roll = rng.random()
        if roll < 0.03:
            result["content"].append({"type": "image", "data": "aGk=", "mimeType": "image/png"})
        elif roll < 0.05:
            result["content"].append({"type": "text", "text": "  second block  "})
        elif roll < 0.06:
            result["isError"] = True
        elif roll < 0.07:
            result["content"] = "not a list"
        elif roll < 0.08:
            result["content"].append(
                rng.choice(({"type": 5, "text": "x"}, {"type": "text", "text": 5}, {"text": "untyped"}))
            )
        elif roll < 0.12:
            result["content"][0]["text"] = _edges(rng, text)
        elif roll < 0.13:
            result["details"] = rng.choice(([1, 2], "details", None))
    return result


def _random_outcome(rng: random.Random) -> tuple[str, Any]:
    roll = rng.random()
    if roll < 0.75:
        return "result", _text_result(_text(rng) + f" {rng.randint(0, 10**9)}", _object(rng), rng)
    if roll < 0.82:
        return "result", rng.choice((None, 0, "plain string", [1, 2], _text(rng), number("1e400")))
    if roll < 0.95:
        return "error", rng.choice(
            ("", "   ", "ENOENT: no such file", "timeout", _text(rng), _edges(rng, "x"))
        )
    return "errorValue", rng.choice(
        ({"code": 7}, 404, False, [1, {"a": None}], number("-0.0"), {"message": "Unknown tool: ghost_tool"})
    )


# -- segments ---------------------------------------------------------------------------------


def seg_noise(b: RunBuilder, n: int) -> None:
    rng = b.rng
    for _ in range(n):
        tool = rng.choice(NOISE_TOOLS)
        b.call(tool, _params(rng, tool), _random_outcome(rng))


def _maybe_noise(b: RunBuilder, rate: float) -> None:
    if b.rng.random() < rate:
        seg_noise(b, 1)


def seg_repeat(b: RunBuilder, n: int) -> None:
    rng = b.rng
    tool = rng.choice(("read", "web_fetch", "grep", "browser", "exec", "nodes", "memory_search", "Read"))
    params = _params(rng, tool)
    kind = rng.random()
    progress = rng.choice((0.0, 0.0, 0.02, 0.1, 0.3))
    noise = rng.choice((0.0, 0.0, 0.05, 0.2))
    version = 0
    for _ in range(n):
        if rng.random() < progress:
            version += 1
        if kind < 0.6:
            outcome: tuple[str, Any] = ("result", _text_result(f"same answer v{version}", {"v": version}))
        elif kind < 0.85:
            outcome = ("error", f"Error: request failed (v{version})")
        else:
            outcome = ("result", rng.choice((None, "same", 7)) if version == 0 else f"v{version}")
        b.call(tool, params, outcome)
        _maybe_noise(b, noise)


def seg_poll(b: RunBuilder, n: int) -> None:
    rng = b.rng
    session = f"s{rng.randint(1, 99)}"
    flavour = rng.random()
    if flavour < 0.35:
        tool, params = "command_status", {"commandId": session, "wait": rng.choice((5, 10, number("1.0")))}
    elif flavour < 0.7:
        tool, params = "process", {"action": "poll", "sessionId": session}
    elif flavour < 0.95:
        tool, params = "process", {"action": "log", "sessionId": session, "limit": rng.choice((50, 200))}
    else:
        tool, params = "process", {"action": "poll", "sessionId": session, "timeout": number("1e21")}
    progress = rng.choice((0.0, 0.0, 0.0, 0.05, 0.2, 0.6))
    lines = 3
    output = "starting"
    status = "running"
    for index in range(n):
        if rng.random() < progress:
            lines += rng.randint(1, 5)
            output += f"\nline {lines}"
        if index == n - 1 and rng.random() < 0.3:
            status = "completed"
        if tool == "command_status":
            details: dict[str, Any] = {"status": status, "output": output}
            text = f"Command {session} is {status}"
        elif params["action"] == "log":
            details = {"status": status, "totalLines": lines, "totalChars": len(output), "truncated": False}
            text = output
        else:
            details = {"status": status, "exitCode": None if status == "running" else 0, "aggregated": output}
            if rng.random() < 0.1:
                details["exitSignal"] = "SIGTERM"
            text = "(no new output)\n\nProcess still running." if status == "running" else output
        details["polledAt"] = rng.randint(0, 10**9) if tool == "process" else None  # ignored by polls
        shown: Any = details
        if rng.random() < 0.02:
            shown = rng.choice(({}, {"status": status}, [status]))
        b.call(tool, params, ("result", _text_result(_edges(rng, text), shown)))
        _maybe_noise(b, 0.03)


def seg_pingpong(b: RunBuilder, n: int) -> None:
    rng = b.rng
    tool_a = rng.choice(("read", "browser", "exec", "grep", "process"))
    tool_b = tool_a if rng.random() < 0.5 else rng.choice(("read", "ls", "web_fetch", "command_status"))
    params_a = {"action": "poll", "sessionId": "p1"} if tool_a == "process" else _params(rng, tool_a)
    params_b = _params(rng, tool_b)
    if params_b == params_a and tool_b == tool_a:
        params_b = {"other": True}
    stable = rng.random() < 0.6
    breaks = rng.choice((0.0, 0.0, 0.03, 0.1))
    for index in range(n):
        tool, params = (tool_a, params_a) if index % 2 == 0 else (tool_b, params_b)
        text = f"{tool} says the same" if stable else f"{tool} changed {index // 4}"
        b.call(tool, params, ("result", _text_result(text, {"side": index % 2})), hold=0.01, never=0.005)
        roll = rng.random()
        if roll < breaks:
            seg_noise(b, 1)
        elif roll < breaks * 1.5:
            b.call(tool, params, ("result", _text_result(text, {"side": index % 2})))


UNKNOWN_FORMATS = (
    "Unknown tool: {name}",
    "unknown tool {name}",
    'Unknown tool: "{name}"',
    "UNKNOWN TOOL: '{upper}'",
    "Tool {name} not found",
    'tool "{name}" is not available',
    "Error: Tool {upper} not found in registry",
    "unknown tool:   {name}.v2-beta",
    "  Unknown tool: {name}  \u3000",
    "Unknown tool:\ufeff{name}",
    "Unknown tool:\u00a0{name}",
    "unknown tool:\x1c{name}",
    "unknown tool\x85{name}",
    "Tool\u2003{name} not found",
    "Unknown tool: \u212a{name}",
    "Unknown tool: \u017f{name}",
    "Unknown tool: \u0130{name}",
    "Tool {name}\u212a is not available",
)


def seg_unknown(b: RunBuilder, n: int) -> None:
    rng = b.rng
    tool = rng.choice(("deploy_app", "search_docs", "mcp_fs", "Read", "exec"))
    name = tool.lower() if rng.random() < 0.8 else rng.choice(("other_tool", "x.y-z"))
    fmt = rng.choice(UNKNOWN_FORMATS)
    drift = rng.choice((0.0, 0.0, 0.05))
    for _ in range(n):
        if rng.random() < drift:
            fmt = rng.choice(UNKNOWN_FORMATS)
            name = rng.choice((name, "renamed_tool"))
        message = fmt.format(name=name, upper=name.upper())
        b.call(tool, _params(rng, tool) if rng.random() < 0.5 else {"q": 1}, ("error", message))
        _maybe_noise(b, 0.04)


def _iso(rng: random.Random) -> str:
    sep = rng.choice(("T", " ", "t"))
    frac = rng.choice(("", f".{rng.randint(0, 999):03d}", f".{rng.randint(0, 999999):06d}"))
    zone = rng.choice(("Z", "z", "+02:00", "-05:30", ""))
    return (
        f"2026-0{rng.randint(1, 9)}-{rng.randint(10, 28)}{sep}{rng.randint(0, 23):02d}:"
        f"{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}{frac}{zone}"
    )


def _duration(rng: random.Random) -> str:
    value = rng.choice((str(rng.randint(1, 999)), f"{rng.uniform(0, 99):.1f}"))
    space = rng.choice(("", "", " ", "\u00a0", "\u2003"))
    unit = rng.choice(("ms", "s", "ns", "us", "seconds", "second", "minutes", "hours", "MS", "Seconds"))
    return f"{value}{space}{unit}"


def _failure_text(rng: random.Random, template: int, meaning: int) -> str:
    """A failure text: ``rng`` draws its volatile parts, ``meaning`` its meaningful ones."""
    if template == 0:
        return f"{_iso(rng)} ERROR build failed after {_duration(rng)} (pid {rng.randint(100, 99999)})"
    if template == 1:
        clock = f"{rng.randint(0, 23)}:{rng.randint(10, 59)}:{rng.randint(10, 59)}"
        return f"npm ERR! code E{meaning}\nnpm ERR! {clock} retry={rng.randint(1, 9)}"
    if template == 2:
        counter, ppid = rng.randint(1, 9), rng.randint(1, 900)
        return f"attempt #{counter} failed: connection refused on port 543{meaning}, ppid: {ppid}"
    if template == 3:
        return f"backup for 2026-08-1{meaning} failed: errno 11{meaning}"
    if template == 4:
        return f"TimeoutError: timed out after {_duration(rng)}, Attempt {rng.randint(1, 5)}"
    return f"error: {WORDS[meaning]} failed"


def _plain(value: Any) -> str:
    """A value as text, a raw JSON number (:func:`number`) without its marks."""
    return str(value).strip(NUMBER_MARK)


def _exec_outcome(rng: random.Random, text: str) -> tuple[str, Any]:
    roll = rng.random()
    if roll < 0.7:
        exit_code: Any = rng.choice(
            (
                1,
                1,
                1,
                1,
                2,
                127,
                -1,
                number("1.0"),
                number("2.5"),
                "1",
                number("1e400"),
                number("-0.0"),
                number("1e-400"),
            )
        )
        details: dict[str, Any] = {
            "status": rng.choice(("failed", "failed", "completed")),
            "exitCode": exit_code,
        }
        where = rng.random()
        if where < 0.65:
            details["aggregated"] = text if rng.random() < 0.9 else _edges(rng, f"  {text}\n")
            return "result", _text_result(f"Command exited with code {_plain(exit_code)}", details)
        if where < 0.85:
            details["aggregated"] = "   "
            return "result", _text_result(text, details)
        if where < 0.93:
            details["aggregated"] = f"(Command exited with code {_plain(exit_code)})"
            return "result", _text_result("", details)
        details["aggregated"] = ""
        return "result", _text_result("", details)
    if roll < 0.8:
        return "result", _text_result("ok", {"status": "completed", "exitCode": 0, "aggregated": "done"})
    if roll < 0.87:
        details = {"status": "failed", "exitCode": 124, "timedOut": True, "aggregated": text}
        return "result", _text_result(text, details)
    if roll < 0.93:
        return "result", _text_result("running", {"status": "running", "tail": text[:12]})
    if roll < 0.97:
        details = {"status": "approval-pending", "command": "rm -rf build", "host": "gateway", "reason": None}
        return "result", _text_result("needs approval", details)
    return "error", "spawn ENOENT"


def seg_exec(b: RunBuilder, n: int) -> None:
    rng = b.rng
    commands = [{"command": f"make {word}"} for word in rng.sample(WORDS, rng.randint(1, 4))]
    if rng.random() < 0.2:
        commands[0]["title"] = "Build"
    template = rng.randint(0, 5)
    meaning = rng.randint(1, 3)
    drift = rng.random() < 0.7  # volatile text differs from call to call
    fixed = _failure_text(rng, template, meaning)
    sticky = rng.choice((0.0, 0.5, 0.9))
    command = rng.choice(commands)
    terminal = rng.choice((0.0, 0.9, 1.0, 1.0))  # else any exec outcome
    for _ in range(n):
        if rng.random() >= sticky:
            command = rng.choice(commands)
        if rng.random() < 0.03:
            meaning = rng.randint(1, 3)
        text = _failure_text(rng, template, meaning) if drift else fixed
        if rng.random() < terminal:
            details = {"status": "failed", "exitCode": 1, "aggregated": text}
            outcome: tuple[str, Any] = ("result", _text_result("Command exited with code 1", details))
        else:
            outcome = _exec_outcome(rng, text)
        b.call("exec", command, outcome)
        _maybe_noise(b, 0.02)


def seg_churn(b: RunBuilder, n: int) -> None:
    rng = b.rng
    flavour = rng.random()
    count = rng.randint(2, 4)
    if flavour < 0.6:
        tool = "write"
        path = f"/work/{rng.choice(WORDS)}.md"
        variants: list[Any] = [{"path": path, "content": f"draft {index}"} for index in range(count)]
    else:
        tool = rng.choice(("edit", "read", "exec"))
        variants = [{"path": f"/work/{rng.choice(WORDS)}", "variant": index} for index in range(count)]
    breaks = rng.choice((0.0, 0.0, 0.03, 0.08))
    for _ in range(n):
        params = rng.choice(variants)
        roll = rng.random()
        if roll < breaks / 3:
            params = {"path": "/work/probe", "probe": rng.randint(0, 9)}
        elif roll < breaks * 2 / 3:
            seg_noise(b, 1)
        if tool == "write":
            changed = roll >= breaks or rng.random() < 0.5
            details = {"changed": not changed, "path": params.get("path")}
            outcome: tuple[str, Any] = (
                "result",
                _text_result(f"No changes to {params.get('path')}", details),
            )
        else:
            outcome = ("error", "Error: permission denied" if roll >= breaks else "Error: other")
        b.call(tool, params, outcome)


def seg_sends(b: RunBuilder, n: int) -> None:
    rng = b.rng
    flavour = rng.random()
    for _ in range(n):
        volatile = {
            "messageId": f"m{rng.randint(0, 10**9)}",
            "ts": rng.randint(0, 10**12),
            "receipt": {"platformMessageIds": [rng.randint(0, 99)]},
        }
        if flavour < 0.5:
            action = rng.choice(("send", "reply", "poll", "sendWithEffect", "read"))
            params: dict[str, Any] = {"action": action, "to": "#general", "text": "same text"}
            details: dict[str, Any] = {"ok": True, **volatile, "channel": "slack"}
            tool = "message"
        elif flavour < 0.8:
            tool, params = "sessions_send", {"sessionKey": "agent:main", "message": "ping"}
            details = {"status": "accepted", "runId": f"r{rng.randint(0, 10**6)}", "delivery": [volatile]}
        else:
            tool, params = "message", {"action": "send", "to": "u1", "text": "hello"}
            details = {
                "result": {"id": f"id{rng.randint(0, 10**6)}", "text": "hello", "direction": "outbound"},
                "createdAt": rng.randint(0, 10**9),
            }
        b.call(tool, params, ("result", _text_result("Sent.", details)))
        _maybe_noise(b, 0.05)


def seg_breaker(b: RunBuilder, n: int) -> None:
    rng = b.rng
    tool = rng.choice(("read", "browser", "process", "command_status", "write"))
    params = {"action": "poll", "sessionId": "g"} if tool == "process" else _params(rng, tool)
    if tool == "write":
        outcome: tuple[str, Any] = ("result", _text_result("No changes", {"changed": False}))
    elif rng.random() < 0.5:
        outcome = ("error", "Error: the same failure")
    else:
        outcome = ("result", _text_result("identical", {"status": "running"}))
    for _ in range(max(n, 31)):
        b.call(tool, params, outcome, hold=0.0, never=0.0)


VETO: dict[str, Any] = {
    "content": [{"type": "text", "text": "blocked: tool loop"}],
    "details": {"status": "blocked", "deniedReason": "tool-loop", "reason": "CRITICAL: loop"},
}


def seg_veto(b: RunBuilder, n: int) -> None:
    """An identical call that a runtime blocked from some point on (outcomes are vetoes)."""
    rng = b.rng
    tool = rng.choice(("read", "exec", "web_fetch", "message"))
    params = _params(rng, tool)
    block_from = rng.randint(5, 22)
    same = ("error", "Error: still failing") if rng.random() < 0.5 else ("result", _text_result("same"))
    for index in range(n):
        if index >= block_from and rng.random() < 0.9:
            b.call(tool, params, ("result", VETO), hold=0.0, never=0.0)
        else:
            b.call(tool, params, same, hold=0.0)
        if rng.random() < 0.03:
            b.outcome_only(tool, params, ("result", VETO))


def seg_calls(b: RunBuilder, n: int) -> None:
    rng = b.rng
    params: Any
    if rng.random() < 0.5:
        tool = "process"
        params = {"action": rng.choice(("list", "kill", "write", "send-keys")), "sessionId": "s"}
        outcome: tuple[str, Any] = ("result", _text_result("ok", {"status": "running"}))
    elif rng.random() < 0.5:
        tool, params = "process", rng.choice(("poll", ["poll"], None))
        outcome = ("result", _text_result("?", {"status": "running"}))
    else:
        tool, params = "write", {"path": "/work/a.txt", "content": "x"}
        changed = rng.choice((True, False, False, 0, None, "false"))
        outcome = ("result", _text_result("Wrote /work/a.txt", {"changed": changed}))
    for _ in range(n):
        b.call(tool, params, outcome)
        _maybe_noise(b, 0.1)


def seg_error_cycle(b: RunBuilder, n: int) -> None:
    """A few argument variants of one tool, every call answered by the same error: argument
    churn, ping-pong when two variants alternate, a known poll when the tool polls."""
    rng = b.rng
    if rng.random() < 0.5:
        tool = "process"
        variants: list[Any] = [
            {"action": "poll", "sessionId": f"s{index}"} for index in range(rng.randint(2, 3))
        ]
    else:
        tool = rng.choice(("read", "edit", "command_status"))
        variants = [{"path": f"/work/v{index}"} for index in range(rng.randint(2, 3))]
    alternate = rng.random() < 0.5
    error = rng.choice(("Error: session not found", "Error: permission denied"))
    for index in range(n):
        params = variants[index % 2] if alternate else rng.choice(variants)
        b.call(tool, params, ("error", error), hold=0.02, never=0.005)


def seg_marathon(b: RunBuilder, n: int) -> None:
    """A long run: loop shapes back to back, the window trimmed over and over."""
    rng = b.rng
    for _ in range(n):
        key = rng.choice(("repeat", "poll", "pingpong", "churn", "exec", "noise", "veto", "unknown"))
        segment, _, (low, high) = SEGMENTS[key]
        segment(b, rng.randint(low, min(high, low + 12)))
        if rng.random() < 0.3:
            b.release()


Segment = Callable[[RunBuilder, int], None]
#: name -> (segment, weight, (min length, max length))
SEGMENTS: dict[str, tuple[Segment, float, tuple[int, int]]] = {
    "noise": (seg_noise, 3.0, (3, 40)),
    "repeat": (seg_repeat, 3.0, (5, 45)),
    "poll": (seg_poll, 2.0, (5, 35)),
    "pingpong": (seg_pingpong, 2.0, (6, 40)),
    "unknown": (seg_unknown, 1.2, (5, 16)),
    "exec": (seg_exec, 2.0, (5, 42)),
    "churn": (seg_churn, 2.0, (8, 32)),
    "sends": (seg_sends, 0.8, (5, 28)),
    "breaker": (seg_breaker, 0.8, (31, 45)),
    "veto": (seg_veto, 0.8, (15, 45)),
    "calls": (seg_calls, 0.6, (5, 25)),
    "marathon": (seg_marathon, 0.25, (8, 20)),
    "error_cycle": (seg_error_cycle, 0.6, (10, 40)),
}


# -- ingredients of known differences ---------------------------------------------------------


def ing_update_plan(b: RunBuilder, n: int) -> None:
    """update_plan calls whose plans differ in text but not in shape."""
    rng = b.rng
    for index in range(n):
        plan = [{"step": f"step {index % 3} {word}", "status": "pending"} for word in rng.sample(WORDS, 2)]
        b.call(
            "update_plan",
            {"plan": plan, "explanation": "replanning"},
            ("result", _text_result("Plan updated")),
        )


LONE = ("\ud800", "\udfff", "\udbff", "\udc00", "\ufffd")


def ing_lone_surrogates(b: RunBuilder, n: int) -> None:
    """Params, keys and results with lone UTF-16 surrogates (and U+FFFD, their replacement)."""
    rng = b.rng
    for _ in range(n):
        lone = rng.choice(LONE)
        params = {"path": f"/work/f{lone}.txt"} if rng.random() < 0.7 else {f"k{lone}": 1}
        b.call("read", params, ("result", _text_result(f"content {rng.choice(LONE)}")))


def ing_untrusted_markers(b: RunBuilder, n: int) -> None:
    """Fetched pages wrapped in EXTERNAL_UNTRUSTED_CONTENT markers with fresh random ids."""
    rng = b.rng
    for _ in range(n):
        marker = f"{rng.getrandbits(64):016x}"
        text = (
            f'<<<EXTERNAL_UNTRUSTED_CONTENT id="{marker}">>>\nSource: Web Fetch\n---\nsame page\n'
            f'<<<END_EXTERNAL_UNTRUSTED_CONTENT id="{marker}">>>'
        )
        b.call(
            "web_fetch", {"url": "https://example.com/same"}, ("result", _text_result(text, {"status": 200}))
        )


def ing_conversation_sends(b: RunBuilder, n: int) -> None:
    """conversations_send / conversations_turn receipts that differ only in volatile ids."""
    rng = b.rng
    tool = rng.choice(("conversations_send", "conversations_turn"))
    for _ in range(n):
        details = {"ok": True, "messageId": f"m{rng.randint(0, 10**9)}", "runId": f"r{rng.randint(0, 10**9)}"}
        b.call(tool, {"conversationId": "c1", "text": "hello"}, ("result", _text_result("Sent.", details)))


def ing_unknown_with_veto(b: RunBuilder, n: int) -> None:
    """A missing tool retried around a veto-shaped outcome."""
    for index in range(max(n, 12)):
        if index == 5:
            b.outcome_only("deploy_app", {"q": 1}, ("result", VETO))
        b.call("deploy_app", {"q": 1}, ("error", "Unknown tool: deploy_app"), hold=0.0, never=0.0)


def ing_long_s_units(b: RunBuilder, n: int) -> None:
    """Terminal exec failures whose drifting durations use U+017F (ſ) or U+212A (K)."""
    rng = b.rng
    unit = rng.choice(("mſ", "ſeconds", "hourſ", "ms\u212a"))
    for _ in range(max(n, 22)):
        text = f"build failed after {rng.randint(1, 999)}{unit}"
        details = {"status": "failed", "exitCode": 1, "aggregated": text}
        b.call("exec", {"command": "make all"}, ("result", _text_result(text, details)), hold=0.0, never=0.0)


#: name -> (segment, rate among runs, (min length, max length), config override)
INGREDIENTS: dict[str, tuple[Segment, float, tuple[int, int]]] = {
    "update_plan": (ing_update_plan, 0.01, (10, 25)),
    "lone_surrogates": (ing_lone_surrogates, 0.01, (8, 24)),
    "untrusted_markers": (ing_untrusted_markers, 0.008, (12, 25)),
    "conversation_sends": (ing_conversation_sends, 0.008, (12, 25)),
    "unknown_with_veto": (ing_unknown_with_veto, 0.006, (12, 15)),
    "long_s_units": (ing_long_s_units, 0.006, (22, 30)),
}
#: config knobs OpenClaw 2026.9 ignores (the rate of runs that get them, like an ingredient)
KNOBS: tuple[dict[str, Any], ...] = (
    {"warningThreshold": 5, "criticalThreshold": 8, "globalCircuitBreakerThreshold": 12},
    {"historySize": 12},
    {"detectors": {"pingPong": False, "genericRepeat": False}},
    {"unknownToolThreshold": 3, "warningThreshold": 15},
)
KNOBS_RATE = 0.008


def _config(rng: random.Random) -> tuple[dict[str, Any], list[str]]:
    roll = rng.random()
    if roll < 0.02:
        return {"enabled": False}, []
    if roll < 0.03:
        return {}, []
    if roll < 0.03 + KNOBS_RATE:
        return {"enabled": True, **rng.choice(KNOBS)}, ["knobs"]
    return {"enabled": True}, []


def make_run(rng: random.Random, name: str) -> Run:
    config, ingredients = _config(rng)
    builder = RunBuilder(rng)
    names = list(SEGMENTS)
    weights = [SEGMENTS[key][1] for key in names]
    segments: list[str] = []
    for ingredient, (segment, rate, (low, high)) in INGREDIENTS.items():
        if rng.random() < rate:
            ingredients.append(ingredient)
            segments.append(ingredient)
            seg_noise(builder, rng.randint(0, 5))
            segment(builder, rng.randint(low, high))
    for _ in range(rng.choice((1, 1, 2, 2, 3, 4))):
        key = rng.choices(names, weights)[0]
        segment, _, (low, high) = SEGMENTS[key]
        segments.append(key)
        segment(builder, rng.randint(low, high))
        if rng.random() < 0.5:
            builder.release()
    builder.release()
    return Run(name, config, builder.steps, segments, ingredients)


def make_fleet(seed: int, runs: int) -> list[Run]:
    rng = random.Random(seed)
    return [make_run(rng, f"run{index}") for index in range(runs)]
