"""The demo's simulated fleet: scripted agents whose tool calls loop in the ways that matter.

Each scenario makes one agent script per run: a list of steps, either a tool call with the
outcome the tool gives, or a compaction retry. Agents honour verdicts like a real runtime:
a blocked call is not executed (no result), an abort ends the run. Seeded: the same seed
gives the same fleet.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["OUTAGE_FROM_S", "OUTAGE_TOOL", "OUTAGE_UNTIL_S", "SCENARIOS", "Scenario", "Step", "outage_error"]

#: The tool that goes down for the whole fleet for a while (seconds into the demo's clock):
#: every call of it in that time fails, whatever the run or the arguments.
OUTAGE_TOOL = "web_search"
OUTAGE_FROM_S = 60
OUTAGE_UNTIL_S = 200


def outage_error(rnd: random.Random) -> str:
    """The outage's error: one error, with a request id and a latency that differ every time."""
    return (
        f"web_search: upstream returned 503 Service Unavailable after {rnd.randint(800, 3000)} ms "
        f"(request {rnd.getrandbits(64):016x})"
    )


@dataclass(frozen=True, slots=True)
class Step:
    tool: str = ""
    params: Any = None
    result: Any = None
    error: str | None = None
    compaction: bool = False


def _text(text: str, **details: Any) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "details": details}


@dataclass(frozen=True)
class Scenario:
    name: str
    agent_id: str
    healthy: bool
    script: Callable[[random.Random], list[Step]]
    description: str
    #: every run but the first is a subagent the first started (its delegation chain, F6)
    delegated: bool = False


def paging(rnd: random.Random) -> list[Step]:
    """Reads a long log page by page, re-listing the folder now and then (legitimate)."""
    steps = []
    for page in range(rnd.randint(20, 40)):
        steps.append(
            Step(
                "read",
                {"path": "logs/app.log", "offset": page * 200, "limit": 200},
                _text(f"lines {page * 200}-{page * 200 + 199}", totalLines=9000),
            )
        )
        if page % 6 == 0:
            steps.append(Step("list_dir", {"path": "logs"}, _text("app.log\nold.log")))
    return steps


def polling_progress(rnd: random.Random) -> list[Step]:
    """Starts a build and polls it; every poll shows progress (legitimate repetition)."""
    steps = [
        Step(
            "exec",
            {"command": "make build", "background": True},
            _text("started", status="running", sessionId="b1", tail=""),
        )
    ]
    polls = rnd.randint(15, 35)
    for n in range(polls):
        steps.append(
            Step(
                "process",
                {"action": "poll", "sessionId": "b1"},
                _text(f"[{n + 1}/{polls}] compiling", status="running", aggregated=f"step {n}"),
            )
        )
    steps.append(
        Step("process", {"action": "poll", "sessionId": "b1"}, _text("done", status="exited", exitCode=0))
    )
    return steps


def batch_edits(rnd: random.Random) -> list[Step]:
    """Rewrites many files one after another, re-running the same test command between batches."""
    steps = []
    for n in range(rnd.randint(20, 35)):
        steps.append(
            Step("write", {"path": f"src/module_{n}.py", "content": f"# v2 {n}"}, _text("ok", bytes=40 + n))
        )
        if n % 8 == 7:
            steps.append(
                Step(
                    "exec",
                    {"command": "pytest -q"},
                    _text("", status="completed", exitCode=0, aggregated=f"{n + 1} passed"),
                )
            )
    return steps


def stuck_poll(rnd: random.Random) -> list[Step]:
    """Polls a hung process that never prints anything again."""
    steps = [
        Step(
            "exec",
            {"command": "./train.sh", "background": True},
            _text("started", status="running", sessionId="t9", tail=""),
        )
    ]
    for _ in range(rnd.randint(35, 45)):
        steps.append(
            Step(
                "process",
                {"action": "poll", "sessionId": "t9"},
                _text("(no new output)", status="running", aggregated="epoch 3/10"),
            )
        )
    return steps


def ping_pong(rnd: random.Random) -> list[Step]:
    """Alternates between reading a config and the same failing validation."""
    steps = []
    for _ in range(rnd.randint(18, 25)):
        steps.append(Step("read", {"path": "config.yaml"}, _text("port: 80")))
        steps.append(
            Step(
                "exec",
                {"command": "validate config.yaml"},
                _text("", status="failed", exitCode=1, aggregated="error: port"),
            )
        )
    return steps


def unknown_tool(rnd: random.Random) -> list[Step]:
    """Keeps calling a tool that this session does not have, with varying arguments."""
    return [
        Step("browser_open", {"url": f"https://example.test/{n}"}, error="Tool browser_open not found")
        for n in range(rnd.randint(14, 20))
    ]


def send_loop(rnd: random.Random) -> list[Step]:
    """Re-sends the same message; receipts differ only in ids and timestamps."""
    params = {"action": "send", "to": "slack:#ops", "text": "deploy finished"}
    return [
        Step(
            "message",
            params,
            _text(
                f"sent {n}",
                ok=True,
                messageId=f"m{rnd.randint(0, 10**9)}",
                ts=1_800_000_000 + n,
                channel="slack",
            ),
        )
        for n in range(rnd.randint(25, 35))
    ]


def failing_exec(rnd: random.Random) -> list[Step]:
    """Re-runs a failing test suite; the output is identical, only durations change."""
    return [
        Step(
            "exec",
            {"command": "npm test"},
            _text(
                "",
                status="failed",
                exitCode=1,
                aggregated="1 failing: auth.spec.ts",
                durationMs=rnd.randint(900, 2000),
                pid=rnd.randint(1000, 9999),
            ),
        )
        for _ in range(rnd.randint(25, 35))
    ]


def argument_churn(rnd: random.Random) -> list[Step]:
    """Cycles three mirror URLs that all answer the same error; no URL repeats often enough to
    make an identical-call streak (caught by 2026-08 argument churn, then its stale abort)."""
    mirrors = ["https://mirror-a.example.test/pkg.tgz", "https://mirror-b.example.test/pkg.tgz"]
    mirrors.append("https://cdn.example.test/pkg.tgz")
    return [
        Step("web_fetch", {"url": mirrors[n % 3]}, error="fetch failed: 403 Forbidden")
        for n in range(rnd.randint(60, 75))
    ]


def drifting_build_failure(rnd: random.Random) -> list[Step]:
    """Re-runs a build that fails the same way; each output has a new clock time, duration and
    pid, so no two results are identical (caught by the 2026-08 exec failure identity)."""
    steps = []
    for n in range(rnd.randint(25, 35)):
        seconds = 10 + n * 7
        output = (
            f"[12:{seconds // 60:02d}:{seconds % 60:02d}] error: linker failed for target release "
            f"after {rnd.randint(40, 90)}.{rnd.randint(0, 9)}s (pid {rnd.randint(1000, 60000)})"
        )
        steps.append(
            Step(
                "exec", {"command": "make release"}, _text("", status="failed", exitCode=2, aggregated=output)
            )
        )
    return steps


def tool_rotator(rnd: random.Random) -> list[Step]:
    """Rotates search tools over a dozen phrasings of one question; every answer is the same
    "nothing found" (no per-tool streak: caught by loopwatch's run_no_progress)."""
    tools = ("grep", "search_docs", "read")
    steps = []
    for n in range(rnd.randint(40, 50)):
        tool = tools[n % 3]
        steps.append(
            Step(
                tool,
                {"query": f"where is the retry budget configured ({n % 12})"},
                _text(f"{tool}: no matches"),
            )
        )
    return steps


def edit_undo(rnd: random.Random) -> list[Step]:
    """Switches a config value back and forth between two versions, each write succeeding
    (caught by loopwatch's edit_undo before OpenClaw's rules)."""
    versions = ["timeout: 30\nretries: 3\n", "timeout: 60\nretries: 5\n"]
    return [
        Step(
            "write",
            {"path": "deploy/config.yaml", "content": versions[n % 2]},
            _text("written", changed=True),
        )
        for n in range(rnd.randint(16, 24))
    ]


def post_compaction(rnd: random.Random) -> list[Step]:
    """Reads a missing file; the context overflows and is compacted; the loop goes on."""
    missing = Step("read", {"path": "docs/PLAN…md"}, error="ENOENT: no such file")
    return [*[missing] * rnd.randint(4, 8), Step(compaction=True), *[missing] * 6]


def research(rnd: random.Random) -> list[Step]:
    """Searches the web and reads notes on one topic, every query new (legitimate; its searches
    fail while the search tool is down for everybody)."""
    topic = rnd.choice(["pricing", "latency", "churn", "onboarding", "security"])
    steps = []
    for n in range(rnd.randint(18, 26)):
        if n % 3 == 0:
            steps.append(Step(OUTAGE_TOOL, {"query": f"{topic} study {n}"}, _text(f"{3 + n} results")))
        else:
            steps.append(Step("read", {"path": f"notes/{topic}-{n}.md"}, _text(f"{topic} note {n}")))
    return steps


def support_tickets(rnd: random.Random) -> list[Step]:
    """Answers tickets: reads each once, writes a reply now and then (legitimate)."""
    steps = []
    for n in range(rnd.randint(12, 20)):
        ticket = rnd.randint(1000, 9999)
        steps.append(Step("read", {"path": f"tickets/{ticket}.json"}, _text(f"ticket {ticket}: open")))
        if n % 4 == 3:
            reply = {"path": f"replies/{ticket}.md", "content": f"Hello, about ticket {ticket} ({n})"}
            steps.append(Step("write", reply, _text("written", changed=True)))
    return steps


def support_rereads(rnd: random.Random) -> list[Step]:
    """The v2 prompt's flaw: a ticket waiting for the customer is re-read until something changes."""
    waiting = Step("read", {"path": "tickets/4711.json"}, _text("ticket 4711: waiting for customer"))
    return [*support_tickets(rnd)[:4], *[waiting] * rnd.randint(24, 30)]


def subagent_storm(rnd: random.Random) -> list[Step]:
    """One subagent of an orchestrator that keeps starting more: it reads the same spec as
    every other subagent did, then does a small job of its own (each run looks healthy)."""
    spec = Step("read", {"path": "spec/importer.md"}, _text("SPEC v3: the importer accepts CSV and JSON."))
    job = [
        Step("grep", {"pattern": f"TODO-{rnd.randint(0, 10**6)}", "path": "src"}, _text("src/importer.py:12"))
        for _ in range(rnd.randint(2, 4))
    ]
    return [spec, *job]


SCENARIOS = [
    Scenario("healthy: paging", "researcher", True, paging, "paging through a long file"),
    Scenario("healthy: polling with progress", "ops", True, polling_progress, "polls that make progress"),
    Scenario("healthy: batch edits", "coder", True, batch_edits, "many distinct writes, same test command"),
    Scenario("stuck poll", "ops", False, stuck_poll, "the same poll answer forever"),
    Scenario("ping-pong", "coder", False, ping_pong, "two calls alternating without progress"),
    Scenario("unknown tool", "researcher", False, unknown_tool, "retrying a tool that does not exist"),
    Scenario("send loop (volatile ids)", "assistant", False, send_loop, "same message, fresh receipt ids"),
    Scenario("failing exec", "coder", False, failing_exec, "identical failure, changing durations"),
    Scenario("loop after compaction", "researcher", False, post_compaction, "the compaction did not help"),
    Scenario("argument churn", "researcher", False, argument_churn, "three URLs, one error, over and over"),
    Scenario(
        "drifting build failure",
        "coder",
        False,
        drifting_build_failure,
        "same failure, new timestamps and pids",
    ),
    Scenario("tool rotator", "researcher", False, tool_rotator, "three tools, one answer, round and round"),
    Scenario("edit-undo", "coder", False, edit_undo, "a change applied and reverted again and again"),
    Scenario(
        "healthy: research (web_search outage)",
        "analyst",
        True,
        research,
        "new queries; the search tool is down for everybody for a while",
    ),
    Scenario(
        "healthy: support v2, most tickets", "support-v2", True, support_tickets, "each ticket read once"
    ),
    Scenario(
        "support v2 prompt: re-reads",
        "support-v2",
        False,
        support_rereads,
        "a prompt flaw that makes many of the agent's runs loop",
    ),
    Scenario(
        "subagent storm",
        "orchestrator",
        False,
        subagent_storm,
        "subagents that each look healthy and redo one another's work",
        delegated=True,
    ),
]
