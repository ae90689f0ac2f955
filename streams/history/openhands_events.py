"""OpenHands event folders → events: the server's (``sessions/<id>/events/<n>.json``) and the
software-agent SDK's (``conversations/<id>/events/event-<n>-<event id>.json``), one event a file.

Rules (besides :mod:`history_runs`'s):

* Runs: one per conversation (the folder that holds ``events/``), named by the folder's name;
  the events in the order of their number (the file name's).
* Server events (``action`` / ``observation``, numeric ``id``): an action with
  ``tool_call_metadata`` is a call of the model's: ``tool`` its ``function_name``,
  ``params`` the arguments of that tool call in the model's response (the action's ``args``
  if the response is not kept), ``tool_call_id`` the model's call id, ``batch_id`` the
  response's id. An observation answers the action its ``cause`` names: an ``error`` (its
  ``content``) for an ``error`` or ``user_rejected`` observation and one with
  ``success: false`` (a command that exited non-zero), else the ``result``, its ``content``.
  Actions of the user or the agent's own (messages, recall, state changes) are no calls.
* SDK events (``kind``): ``ActionEvent`` is a call: ``tool`` its ``tool_name``, ``params`` its
  ``tool_call``'s arguments (else its ``action`` without ``kind``), ``tool_call_id``,
  ``batch_id`` the ``llm_response_id``. ``ObservationEvent`` is its result: an ``error`` when the
  observation ``is_error``, else the ``result``, the observation's text. ``UserRejectObservation``
  (``rejection_reason``) and ``AgentErrorEvent`` (``error``) are errors; an outcome whose action
  the folder does not hold keeps its ``tool_name``, with ``{}`` for params.
* Event ids: ``<conversation>-<event id>`` (the event's own id). Times: the events' timestamps
  (OpenHands writes them without a zone: UTC).
* A file that is not one JSON event object is skipped and reported (``file:1``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, TextIO

from loopwatch.detectors.events import Event
from loopwatch.streams.history.history_runs import (
    RunLog,
    Skips,
    checked,
    finish_runs,
    iso_ms,
    json_document,
    report,
    text_of,
)
from loopwatch.streams.inputs.compressed import read_input

__all__ = ["AGENT", "conversation_events", "is_openhands_event", "read_openhands_events"]

AGENT = "openhands"
_FILE = re.compile(r"\A(?:(\d+)|event-(\d{5,})-[^/]+)\.json\Z")
_FAILED_OBSERVATIONS = ("error", "user_rejected")


def is_openhands_event(path: Path, head: list[dict[str, Any]] | None) -> bool:
    """Whether a file is one event of an OpenHands ``events`` folder."""
    if path.parent.name != "events" or _FILE.match(path.name) is None or not head or len(head) != 1:
        return False
    event = head[0]
    if isinstance(event.get("kind"), str):
        return isinstance(event.get("id"), str) and "source" in event
    return isinstance(event.get("id"), int) and ("action" in event or "observation" in event)


def _number(path: Path) -> int:
    found = _FILE.match(path.name)
    return int(next(g for g in found.groups() if g is not None)) if found else -1


def _model_arguments(metadata: dict[str, Any]) -> Any:
    """The arguments of the model's tool call an action carries out (``None`` if not kept)."""
    response = metadata.get("model_response")
    choices = response.get("choices") if isinstance(response, dict) else None
    for choice in choices if isinstance(choices, list) else []:
        message = choice.get("message") if isinstance(choice, dict) else None
        calls = message.get("tool_calls") if isinstance(message, dict) else None
        for call in calls if isinstance(calls, list) else []:
            function = call.get("function") if isinstance(call, dict) else None
            if call.get("id") == metadata.get("tool_call_id") and isinstance(function, dict):
                arguments = function.get("arguments")
                if isinstance(arguments, str):
                    decoded = json_document(arguments.encode("utf-8", "surrogatepass"))
                    return decoded if decoded is not None else arguments
                return arguments
    return None


class _Server:
    """The server's events: actions by their id, for the observations that name them."""

    def __init__(self, run: RunLog, skips: Skips) -> None:
        self.run, self.skips = run, skips
        self.actions: dict[int, str] = {}  # action event id -> the model's call id

    def event(self, event: dict[str, Any], where: str, at: int | None) -> None:
        metadata = event.get("tool_call_metadata")
        if "action" in event and isinstance(metadata, dict):
            name = metadata.get("function_name")
            if not isinstance(name, str) or not name:
                self.skips.add(where, "an action whose tool_call_metadata names no function")
                return
            call_id = metadata.get("tool_call_id")
            call_id = call_id if isinstance(call_id, str) and call_id else f"{event['id']}"
            params = _model_arguments(metadata)
            if params is None:
                params = event.get("args", {})
            response = metadata.get("model_response")
            batch = (
                response.get("id")
                if isinstance(response, dict) and isinstance(response.get("id"), str)
                else None
            )
            self.actions[event["id"]] = call_id
            self.run.call(where, str(event["id"]), at, name, params, call_id, batch)
        elif (
            "observation" in event and isinstance(event.get("cause"), int) and event["cause"] in self.actions
        ):
            call_id = self.actions[event["cause"]]
            content = event.get("content", "")
            if event.get("observation") in _FAILED_OBSERVATIONS or event.get("success") is False:
                self.run.outcome(where, str(event["id"]), at, call_id, self.skips, error=content)
            else:
                self.run.outcome(where, str(event["id"]), at, call_id, self.skips, result=content)


def _sdk_event(run: RunLog, event: dict[str, Any], where: str, at: int | None, skips: Skips) -> None:
    kind = event.get("kind")
    call_id = event.get("tool_call_id") if isinstance(event.get("tool_call_id"), str) else None
    tool = event.get("tool_name") if isinstance(event.get("tool_name"), str) else None
    key = str(event["id"])
    if kind == "ActionEvent":
        if tool is None:
            skips.add(where, "an ActionEvent without a tool_name")
            return
        call = event.get("tool_call")
        arguments = call.get("arguments") if isinstance(call, dict) else None
        params = (
            json_document(arguments.encode("utf-8", "surrogatepass")) if isinstance(arguments, str) else None
        )
        if params is None:
            action = event.get("action")
            params = {k: v for k, v in action.items() if k != "kind"} if isinstance(action, dict) else {}
        batch = event.get("llm_response_id") if isinstance(event.get("llm_response_id"), str) else None
        run.call(where, key, at, tool, params, call_id, batch)
    elif kind == "ObservationEvent":
        observation = event.get("observation")
        observation = observation if isinstance(observation, dict) else {}
        content = observation.get("content")
        text = text_of(content)
        body = text if text is not None else content
        if observation.get("is_error") is True:
            run.outcome(where, key, at, call_id, skips, error=body, tool=tool)
        else:
            run.outcome(where, key, at, call_id, skips, result=body, tool=tool)
    elif kind == "UserRejectObservation":
        run.outcome(
            where, key, at, call_id, skips, error=event.get("rejection_reason", "rejected"), tool=tool
        )
    elif kind == "AgentErrorEvent":
        run.outcome(where, key, at, call_id, skips, error=event.get("error", "agent error"), tool=tool)


def conversation_events(
    conversation: str, files: list[Path], agent_id: str, skips: Skips
) -> list[tuple[str, Event]]:
    """``(where, event)`` of one conversation's event files (see the module rules)."""
    run = RunLog(conversation, session_id=conversation, end_key="end")
    server = _Server(run, skips)
    for path in sorted(files, key=lambda p: (_number(p), p.name)):
        where = f"{path}:1"
        event = json_document(read_input(path))
        if not isinstance(event, dict) or not isinstance(event.get("id"), (int, str)):
            skips.add(where, "not a JSON event object")
            continue
        at = iso_ms(event.get("timestamp"))
        if isinstance(event.get("kind"), str):
            _sdk_event(run, event, where, at, skips)
        else:
            server.event(event, where, at)
        run.saw(at)
    return finish_runs([run], conversation, agent_id)


def read_openhands_events(folder: Path, files: list[Path], agent_id: str | None, err: TextIO) -> list[Event]:
    """The events of one conversation's ``events`` folder; each skipped file is reported."""
    skips = Skips()
    conversation = os.fsencode(folder.parent.name).decode("utf-8", "backslashreplace")
    found = conversation_events(conversation, files, agent_id or AGENT, skips)
    events = checked(found, skips)
    report(skips, err)
    return events
