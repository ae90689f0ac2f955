"""``loopwatch mcp`` as an MCP server of the real Claude Code CLI, offline.

Claude Code (``runtimes/claude-code.sh``, ``claude -p``) runs against a scripted model on
127.0.0.1 (``tests.integration.fake_model``) that calls one MCP tool, server-everything's ``echo``
(``runtimes/mcp-servers.sh``), with the same message every turn. The server is configured as
docs/mcp.md says: its command prefixed with ``loopwatch mcp --config FILE --`` in an
``mcpServers`` entry. Every assertion is about what Claude Code did: the tool calls it got from
the model and the results it gave back (its ``stream-json`` output), and what the model was sent
(the fake model's recorded requests). The expected results come from the in-process core
(``Engine``) fed the same calls and the result the server gives. Without npm or the registry
this fails: it never skips.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import ROOT
from tests.integration.fake_model import FakeModel, RepeatTool, refused_with
from tests.integration.runtimes.claude_code_env import offline_claude_env
from tests.integration.runtimes.mcp_servers import McpServers, loopwatch_argv
from tests.integration.runtimes.process import install, run_bounded
from tests.mcp_expected import LOOP_CONFIGS, client_texts, core_decisions

CLAUDE = ROOT / "tests" / "integration" / "runtimes" / "claude-code.sh"
TOOL = "mcp__everything__echo"
ECHO = {"message": "same again"}
ECHO_TEXTS = ["Echo: same again"]
STOPPED = "loopwatch stopped this turn"
PROMPT = "Echo the message until it works."
CLAUDE_TIMEOUT_S = 180


@pytest.fixture(scope="module")
def claude() -> str:
    return install(CLAUDE)[-1]


@pytest.fixture(scope="module")
def servers() -> McpServers:
    return McpServers.install()


@dataclass(frozen=True)
class Result:
    texts: list[str]
    is_error: bool


@dataclass
class ClaudeRun:
    returncode: int
    lines: list[dict[str, Any]]
    stderr: str

    def uses(self, name: str) -> list[tuple[str, Any]]:
        """The calls of ``name`` Claude Code got from the model: (id, input), in order."""
        found = []
        for line in self.lines:
            if line.get("type") == "assistant":
                for block in line["message"].get("content", []):
                    if block.get("type") == "tool_use" and block["name"] == name:
                        found.append((block["id"], block["input"]))
        return found

    def results(self) -> dict[str, Result]:
        """The tool results Claude Code gave back, by call id: the texts of their content."""
        found = {}
        for line in self.lines:
            content = line.get("message", {}).get("content") if line.get("type") == "user" else None
            for block in content if isinstance(content, list) else []:
                if block.get("type") == "tool_result":
                    given = block.get("content")
                    parts = given if isinstance(given, list) else [{"type": "text", "text": given}]
                    texts = [part["text"] for part in parts if part.get("type") == "text"]
                    found[block["tool_use_id"]] = Result(texts, bool(block.get("is_error")))
        return found


def run_claude(claude: str, workdir: Path, model: FakeModel, mcp_config: dict[str, Any]) -> ClaudeRun:
    env, project = offline_claude_env(workdir, model.url)
    config = workdir / "mcp.json"
    config.write_text(json.dumps(mcp_config, indent=2))
    env |= {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "ENABLE_TOOL_SEARCH": "false",  # the MCP tools in the model's tool list, not deferred
    }
    command = [
        *(claude, "-p", PROMPT, "--output-format", "stream-json", "--verbose"),
        *("--mcp-config", str(config), "--strict-mcp-config", "--allowedTools", TOOL),
    ]
    done = run_bounded(command, env=env, cwd=project, timeout=CLAUDE_TIMEOUT_S)
    assert not done.timed_out, done.describe()
    lines = []
    for text in done.stdout.splitlines():
        try:
            value = json.loads(text)
        except ValueError:
            continue
        if isinstance(value, dict):
            lines.append(value)
    return ClaudeRun(done.returncode, lines, done.stderr)


@pytest.mark.parametrize("config_name", sorted(LOOP_CONFIGS))
def test_claude_code_gets_the_warning_the_refusal_and_the_abort_where_the_core_says(
    claude: str, servers: McpServers, tmp_path: Path, config_name: str
) -> None:
    config = tmp_path / "loopwatch.json"
    config.write_text(json.dumps(LOOP_CONFIGS[config_name]))
    argv = loopwatch_argv()
    server = servers.everything_stdio()
    args = [*argv[1:], "mcp", "--config", str(config), "--", server.command, *server.args]
    mcp_config = {"mcpServers": {"everything": {"command": argv[0], "args": args}}}
    # the model calls echo with the same message every turn, until loopwatch stops the turn
    model = FakeModel(RepeatTool(TOOL, ECHO, stop_when=refused_with(STOPPED), max_calls=20))
    with model:
        run = run_claude(claude, tmp_path, model, mcp_config)
    assert run.returncode == 0, run.stderr[-2000:]

    uses, results = run.uses(TOOL), run.results()
    assert uses, run.stderr[-2000:]
    assert all(given == ECHO for _, given in uses)
    decisions = core_decisions(LOOP_CONFIGS[config_name], [(TOOL.split("__")[-1], ECHO)] * len(uses), _echoed)
    actions = [decision.action for decision in decisions]
    # Claude Code called the tool until the core's first abort, and got each call's answer
    assert actions[-1] == "abort", actions
    assert actions.index("abort") == len(uses) - 1, actions
    assert {"warn", "block"} <= set(actions), actions
    for (call_id, _), decision in zip(uses, decisions, strict=True):
        is_error, texts = client_texts(decision, ECHO_TEXTS)
        assert results[call_id] == Result(texts, is_error), (actions, call_id)
    # and the model read them: the abort's text last
    last = model.conversations()[-1].last_outcomes
    assert [outcome.text for outcome in last] == ["\n".join(client_texts(decisions[-1], ECHO_TEXTS)[1])]


def _echoed(index: int) -> dict[str, Any]:
    return {"result": [{"type": "text", "text": text} for text in ECHO_TEXTS]}
