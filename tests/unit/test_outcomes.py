from typing import Any

import pytest

from loopwatch.detectors.hashing import Digester
from loopwatch.detectors.outcomes import (
    MISSING,
    ErrorMessage,
    extract_unknown_tool_name,
    hash_outcome,
    is_known_poll,
    strip_volatile_send_ids,
)
from loopwatch.detectors.stable_json import from_python
from tests.helpers import text_result

SHA = Digester("sha256")


def h(
    tool: str, params: Any, result: Any = MISSING, error: Any = MISSING, sends: frozenset[str] = frozenset()
) -> str | None:
    return hash_outcome(tool, from_python(params), from_python(result), error, SHA, sends)[0]


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("Tool exec not found", "exec"),
        ("Unknown tool: 'Browser.Open'", "browser.open"),
        ('The tool "web_search" is not available in this session', "web_search"),
        ("permission denied", None),
        ("   ", None),
        # JavaScript's white space and ASCII-only case folding, as OpenClaw's regexes read them
        ("Unknown tool:\ufeffsearch_docs", "search_docs"),
        ("unknown tool:\x1cx.y-z", None),
        ("unknown tool:\x85exec", None),
        ("unknown tool: \u017fearch", None),
    ],
)
def test_unknown_tool_name(text: str, name: str | None) -> None:
    assert extract_unknown_tool_name(text) == name


def test_errors_hash_by_text_and_empty_error_is_its_name() -> None:
    assert h("t", {}, error=ErrorMessage("boom")) == h("t", {}, error="boom")
    assert h("t", {}, error=ErrorMessage("")) == h("t", {}, error="Error")
    assert h("t", {}, error=ErrorMessage("boom")) != h("t", {}, error={"code": 1})
    assert h("t", {}, error=ErrorMessage("x")).startswith("error:")  # type: ignore[union-attr]


def test_no_result_and_loop_veto_have_no_hash() -> None:
    assert h("t", {}) is None
    veto = text_result("blocked", status="blocked", deniedReason="tool-loop")
    assert h("read", {}, veto) is None
    other_veto = text_result("blocked", status="blocked", deniedReason="approval")
    assert h("read", {}, other_veto) is not None


def test_null_and_scalars_are_real_results() -> None:
    assert h("t", {}, None) is not None
    assert h("t", {}, None) != h("t", {}, "null ")


def test_exec_ignores_volatile_details() -> None:
    a = text_result("out", status="completed", exitCode=0, durationMs=5, aggregated=" same ", pid=1)
    b = text_result("other text", status="completed", exitCode=0, durationMs=9, aggregated="same", pid=2)
    assert h("exec", {"command": "ls"}, a) == h("exec", {"command": "ls"}, b)
    c = text_result("out", status="failed", exitCode=1, aggregated="same")
    assert h("exec", {"command": "ls"}, a) != h("exec", {"command": "ls"}, c)
    running = [text_result("x", status="running", tail="t", sessionId=s) for s in ("a", "b")]
    assert h("exec", {}, running[0]) == h("exec", {}, running[1])


def test_exec_unlisted_status_uses_the_default_hash() -> None:
    a = text_result("x", status="weird", pid=1)
    b = text_result("x", status="weird", pid=2)
    assert h("exec", {}, a) != h("exec", {}, b)


def test_process_poll_uses_listed_fields_only() -> None:
    params = {"action": "poll", "sessionId": "s"}
    a = text_result("(no new output)", status="running", aggregated="x", pid=1)
    b = text_result("(no new output)", status="running", aggregated="x", pid=2)
    assert h("process", params, a) == h("process", params, b)
    missing_status = text_result("(no new output)", aggregated="x")
    assert h("process", params, missing_status) != h(
        "process", params, text_result("(no new output)", status=None, aggregated="x")
    )


def test_send_results_drop_volatile_ids() -> None:
    params = {"action": "send", "text": "hi"}
    a = text_result("1", ok=True, messageId="m1", receipt={"id": 1}, route={"id": "A"})
    b = text_result("2", ok=True, messageId="m2", receipt={"id": 2}, route={"id": "A"})
    c = text_result("3", ok=True, messageId="m3", route={"id": "B"})
    assert h("message", params, a) == h("message", params, b)
    assert h("message", {"action": "read"}, a) != h("message", {"action": "read"}, b)
    assert h("message", params, a) != h("message", params, c)
    assert h("telegram", {}, a) != h("telegram", {}, b)
    assert h("telegram", {}, a, sends=frozenset({"telegram"})) == h(
        "telegram", {}, b, sends=frozenset({"telegram"})
    )


def test_message_object_rule() -> None:
    msg = {"id": "x", "text": "t", "direction": "out", "conversation": {"id": "room"}}
    assert strip_volatile_send_ids({"message": msg}) == {
        "message": {"text": "t", "direction": "out", "conversation": {"id": "room"}}
    }
    assert strip_volatile_send_ids({"id": "keep", "text": "t"}) == {"id": "keep", "text": "t"}


def test_update_plan_ignores_wording() -> None:
    a = text_result("Plan updated", ok=True)
    b = text_result("Plan updated again", ok=True)
    assert h("update_plan", {}, a) == h("update_plan", {}, b)
    assert SHA.args_hash("update_plan", {"plan": [{"step": "a", "status": "x"}]}) == SHA.args_hash(
        "update_plan", {"plan": [{"step": "b", "status": "x"}]}
    )


def test_known_poll() -> None:
    assert is_known_poll("command_status", None)
    assert is_known_poll("process", {"action": "log"})
    assert not is_known_poll("process", {"action": "kill"})
    assert not is_known_poll("exec", {"action": "poll"})


def test_args_hash_keeps_tool_name_and_differs_by_digest() -> None:
    xxh = Digester("xxh3")
    assert SHA.args_hash("read", {"a": 1}).startswith("read:")
    assert len(SHA.args_hash("read", {}).split(":")[1]) == 64
    assert len(xxh.args_hash("read", {}).split(":")[1]) == 32
    assert SHA.args_hash("read", {"a": 1}) != SHA.args_hash("write", {"a": 1})
