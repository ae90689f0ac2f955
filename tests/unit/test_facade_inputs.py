"""What the in-process detector takes from a runtime's Python values: every door's limits,
with the field named, before anything is hashed; never a crash of the process."""

from __future__ import annotations

import datetime
import enum
import pathlib
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from typing import Any

import pytest

from loopwatch.detectors.events import InvalidEvent
from loopwatch.detectors.facade import LoopDetector


def test_values_nested_without_end_are_refused_in_a_process_that_lives_on() -> None:
    program = textwrap.dedent(
        """
        from loopwatch.detectors.events import InvalidEvent
        from loopwatch.detectors.facade import LoopDetector
        detector = LoopDetector()
        cyclic = {"a": 1}
        cyclic["self"] = cyclic
        deep = []
        for _ in range(100_000):
            deep = [deep]
        for params in (cyclic, deep, (((),),) * 1):
            try:
                print(detector.before_tool_call("r", "read", params).action)
            except InvalidEvent as exc:
                print(exc.reason)
        try:
            detector.after_tool_call("r", "read", {}, result=deep)
        except InvalidEvent as exc:
            print(exc.reason)
        """
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]  # (a segmentation fault before: -11)
    assert done.stdout.splitlines() == [
        "params: nests more than 64 arrays and objects (or holds itself)",
        "params: nests more than 64 arrays and objects (or holds itself)",
        "allow",
        "result: nests more than 64 arrays and objects (or holds itself)",
    ]


def test_the_nesting_limit_is_the_wire_s() -> None:
    detector = LoopDetector()
    nested: Any = 1
    for _ in range(64):
        nested = [nested]
    assert detector.before_tool_call("r", "read", nested).action == "allow"
    with pytest.raises(InvalidEvent, match="params: nests more than 64"):
        detector.before_tool_call("r", "read", (nested,))  # a tuple nests as a list does


def print_later() -> None:
    """A function: its text is ``<function print_later at 0x…>``."""


class Opaque:
    """No text of its own: str() is its memory address."""


@dataclass
class Query:
    path: str


def test_an_object_whose_text_is_its_address_is_refused_and_one_with_a_repr_detected() -> None:
    detector = LoopDetector()
    with pytest.raises(InvalidEvent, match="params: a Opaque has no JSON form"):
        detector.before_tool_call("r", "read", {"q": Opaque()})
    with pytest.raises(InvalidEvent, match="result: a Opaque has no JSON form"):
        detector.after_tool_call("r", "read", {}, result=[Opaque()])
    with pytest.raises(InvalidEvent, match="params: a function has no JSON form"):
        detector.before_tool_call("r", "read", {"callback": print_later})
    when = datetime.datetime(2026, 12, 5, tzinfo=datetime.UTC)
    actions = []
    for _n in range(11):  # a dataclass and a datetime have texts of their own: equal calls match
        decision = detector.before_tool_call("r2", "read", {"q": Query("/x"), "at": when})
        actions.append(decision.action)
        detector.after_tool_call("r2", "read", {"q": Query("/x"), "at": when}, error="ENOENT")
    assert actions == ["allow"] * 10 + ["warn"]


@pytest.mark.parametrize(
    ("call", "reason"),
    [
        ({"run_id": None}, "run_id or session_id: one of them is required"),
        ({"run_id": ""}, "run_id or session_id: one of them is required"),
        ({"run_id": "   "}, "run_id or session_id: one of them is required"),
        ({"run_id": 123}, "run_id: must be a string, not int"),
        ({"tool": None}, "tool: must be a string, not None"),
        ({"tool": ""}, "tool: must be a non-empty string"),
        ({"tool": "t" * 600}, "tool: holds 600 bytes, more than the limit of 512"),
        ({"tool_call_id": 5}, "tool_call_id: must be a string, not int"),
        ({"agent_id": b"a"}, "agent_id: must be a string, not bytes"),
        ({"ts": "1"}, "ts: must be an integer (milliseconds), not str"),
        ({"ts": True}, "ts: must be an integer (milliseconds), not bool"),
        ({"ts": 10**30}, "ts: must fit in a signed 64-bit integer"),
        ({"parent_run_id": 5}, "parent_run_id: must be a string, not int"),
        ({"session_id": "s\ud800"}, "session_id: must be valid Unicode"),
    ],
)
def test_a_call_no_door_would_take_is_refused_naming_its_field(call: dict[str, Any], reason: str) -> None:
    detector = LoopDetector()
    fields: dict[str, Any] = {"run_id": "r", "tool": "read", **call}
    with pytest.raises(InvalidEvent) as refused:
        detector.before_tool_call(fields.pop("run_id"), fields.pop("tool"), {}, **fields)
    assert refused.value.reason.startswith(reason)
    assert detector.before_tool_call("r", "read", {}).action == "allow"  # and nothing else changed


def test_a_session_alone_names_the_run_and_ending_or_arming_checks_the_id() -> None:
    detector = LoopDetector()
    assert detector.before_tool_call("", "read", {}, session_id="s1").action == "allow"
    with pytest.raises(InvalidEvent, match="run_id: must be a string, not int"):
        detector.end_run(7)  # type: ignore[arg-type]
    with pytest.raises(InvalidEvent, match="run_id or session_id"):
        detector.on_compaction_retry(None)  # type: ignore[arg-type]


class Tool(enum.StrEnum):
    READ = "read"


class Loud:
    def __str__(self) -> str:
        raise RuntimeError("no text")

    __repr__ = __str__


def test_values_are_what_the_wire_carries_the_same_for_both_paths() -> None:
    from loopwatch.detectors.event_builders import python_value

    value = {
        "path": pathlib.PurePosixPath("/x"),
        "query": Query("/y"),
        "tool": Tool.READ,
        "n": 2.0,
        "blob": b"ab",
        "failed": ValueError("bad"),
        1: (1, 2),
    }
    assert python_value("params", value) == {
        "path": "/x",
        "query": "Query(path='/y')",
        "tool": "read",
        "n": 2,
        "blob": {"data": "YWI=", "type": "Uint8Array"},
        "failed": {"message": "bad", "name": "ValueError"},
        "1": [1, 2],
    }
    assert type(python_value("params", {"tool": Tool.READ})["tool"]) is str


def test_a_str_subclass_id_is_its_text_and_measured_as_such() -> None:
    detector = LoopDetector()
    assert detector.before_tool_call("r", Tool.READ, {}).action == "allow"
    with pytest.raises(InvalidEvent, match="run_id: holds 2000 bytes"):
        detector.before_tool_call(type("RunId", (str,), {})("r" * 2000), "read", {})


def test_an_object_whose_text_fails_or_keys_that_are_addresses_are_refused_naming_the_field() -> None:
    detector = LoopDetector()
    with pytest.raises(
        InvalidEvent, match=r"params: a Loud has no text \(its __str__ raised RuntimeError: no text\)"
    ):
        detector.before_tool_call("r", "read", {"x": Loud()})
    with pytest.raises(InvalidEvent, match="params: a Opaque has no JSON form"):
        detector.before_tool_call("r", "read", {Opaque(): 1})
    with pytest.raises(InvalidEvent, match="result: a Loud has no text"):
        detector.after_tool_call("r", "read", {}, result={Loud(): 1})
