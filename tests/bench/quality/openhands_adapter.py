"""The OpenHands SDK's shipped StuckDetector, replayed over the corpus.

Runs in .bench/quality-venv-openhands (openhands-sdk 1.58.2 needs Python >= 3.12). Usage, from
the repository root:
    .bench/quality-venv-openhands/bin/python -m tests.bench.quality.openhands_adapter [EVENTS|-]
prints one JSON line per run:
{"run_id", "calls", "first_stop", "first_warn", "stuck_after_last"}.

What is called, from the installed package: ``StuckDetector`` with its default
``StuckDetectionThresholds`` (4 identical action-observation pairs, an action-error streak of 3
nudged and of 4 stopped, 3 agent messages, a 6-step alternation; it reads the last 20 events
after the last user message) over a real ``ConversationState``, consulted through
``LocalConversation._check_stuck_or_nudge``, the method the conversation's run loop calls before
every agent step: it first asks ``get_action_error_nudge()`` (a nudge is appended as an
environment message and the step goes ahead), else ``is_stuck()`` (the run stops, status STUCK).

The replay, per run, one fresh state and detector; per agent step (a call, or the consecutive
calls of one model response sharing a ``batch_id``, as one ``agent.step`` emits them):
  1. the run loop's check, before the step;
  2. the step's ``ActionEvent``s, then their outcomes in call order: a result becomes an
     ``ObservationEvent``, an error the ``AgentErrorEvent`` the SDK's executor makes of a tool
     that raised (``"Error executing tool '<tool>': <error>"``); a call whose run ended before its
     result gets no outcome.
Reported indices (1-based over the run's calls):
  * ``first_stop``: the first call of the first step before which the check said stuck, i.e. the
    first call the SDK would not have let the agent make; the steps after it are not fed;
  * ``first_warn``: the first call of the first step made after an action-error nudge;
  * ``stuck_after_last``: the check after the run's last step said stuck (nothing left to stop,
    so ``first_stop`` stays null).

Stand-ins, since the corpus has no model, no workspace and no tool objects:
  * the agent is a real ``Agent`` with a real ``LLM`` object that is never called (model name
    "openai/stand-in", no key) and no tools; the workspace a ``LocalWorkspace`` on a temporary
    directory; the event store an ``InMemoryFileStore``;
  * each call is an ``MCPToolAction`` (the SDK's action for a tool it only knows by name: its
    arguments as a plain dict) and each result an ``MCPToolObservation`` holding the result as
    one ``TextContent``; ``ActionEvent.thought`` is empty (the corpus has no model text), which
    makes actions with equal arguments equal where the agent's own thoughts might have differed;
  * ``_check_stuck_or_nudge`` is called with a stand-in ``self`` that has only what it reads: the
    detector, the event sink (the state's ``append_event``) and the state.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import tempfile
import uuid
from types import SimpleNamespace
from typing import Any

from tests.bench.quality.corpus_runs import (
    Call,
    Run,
    answer_line,
    default_events_path,
    read_runs,
    result_text,
)


class OpenHandsReplay:
    """The SDK's classes, imported once, and one run's replay through them."""

    def __init__(self, workdir: str) -> None:
        sdk = importlib.import_module("openhands.sdk")
        self.state_module = importlib.import_module("openhands.sdk.conversation.state")
        self.detector_class = importlib.import_module(
            "openhands.sdk.conversation.stuck_detector"
        ).StuckDetector
        self.conversation_class = importlib.import_module(
            "openhands.sdk.conversation.impl.local_conversation"
        ).LocalConversation
        self.event = importlib.import_module("openhands.sdk.event")
        self.llm_module = importlib.import_module("openhands.sdk.llm")
        self.mcp = importlib.import_module("openhands.sdk.mcp.definition")
        self.file_store_class = importlib.import_module("openhands.sdk.io").InMemoryFileStore
        workspace_class = importlib.import_module("openhands.sdk.workspace").LocalWorkspace
        self.agent = sdk.Agent(llm=sdk.LLM(model="openai/stand-in", usage_id="agent"), tools=[])
        self.workspace = workspace_class(working_dir=workdir)

    def _action(self, call: Call) -> Any:
        tool_call_id = f"call_{uuid.uuid4().hex}"
        params = call.params if isinstance(call.params, dict) else {"input": call.params}
        return self.event.ActionEvent(
            thought=[],
            action=self.mcp.MCPToolAction(data=params),
            tool_name=call.tool,
            tool_call_id=tool_call_id,
            tool_call=self.llm_module.MessageToolCall(
                id=tool_call_id, name=call.tool, arguments=json.dumps(params), origin="completion"
            ),
            llm_response_id=str(uuid.uuid4()),
        )

    def _outcome(self, call: Call, action: Any) -> Any:
        if call.outcome == "error":
            return self.event.AgentErrorEvent(
                error=f"Error executing tool '{call.tool}': {result_text(call.error)}",
                tool_name=call.tool,
                tool_call_id=action.tool_call_id,
            )
        observation = self.mcp.MCPToolObservation(
            tool_name=call.tool, content=[self.llm_module.TextContent(text=result_text(call.result))]
        )
        return self.event.ObservationEvent(
            observation=observation,
            action_id=action.id,
            tool_name=call.tool,
            tool_call_id=action.tool_call_id,
        )

    def replay(self, run: Run) -> str:
        state = self.state_module.ConversationState.create(
            id=uuid.uuid4(),
            agent=self.agent,
            workspace=self.workspace,
            file_store=self.file_store_class(),
        )
        detector = self.detector_class(state)
        conversation = SimpleNamespace(_stuck_detector=detector, _on_event=state.append_event, _state=state)
        first_warn: int | None = None
        for step in run.steps():
            nudges_before = len(state.events)
            if self.conversation_class._check_stuck_or_nudge(conversation):
                return answer_line(run, step[0].index, first_warn, stuck_after_last=False)
            if first_warn is None and len(state.events) > nudges_before:
                first_warn = step[0].index
            actions = [self._action(call) for call in step]
            for action in actions:
                state.append_event(action)
            for call, action in zip(step, actions, strict=True):
                if call.outcome is not None:
                    state.append_event(self._outcome(call, action))
        stuck_after_last = bool(detector.is_stuck())
        return answer_line(run, None, first_warn, stuck_after_last=stuck_after_last)


def main(argv: list[str]) -> int:
    source = argv[1] if len(argv) > 1 else str(default_events_path())
    for name, value in {
        "OPENHANDS_SUPPRESS_BANNER": "1",
        "LOG_LEVEL": "ERROR",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }.items():
        os.environ.setdefault(name, value)
    out = sys.stdout
    sys.stdout = sys.stderr  # the package's own printing must not mix with the answers
    with tempfile.TemporaryDirectory(prefix="openhands-replay-") as workdir:
        replay = OpenHandsReplay(workdir)
        for run in read_runs(source):
            out.write(replay.replay(run) + "\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
