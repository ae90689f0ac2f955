"""What ``loopwatch mcp`` reads of JSON-RPC and what it writes (``streams/mcp/messages.py``),
on messages shaped as MCP's specification and its SDKs write them, and the byte streams split
into lines and SSE events (``streams/mcp/sse.py``)."""

from __future__ import annotations

import json

import pytest

from loopwatch.detectors.outcomes import MISSING
from loopwatch.streams.mcp.messages import (
    answer_keys,
    id_key,
    outcome,
    read_client,
    read_server,
    tool_error,
    with_note,
)
from loopwatch.streams.mcp.sse import EventSplitter, LineSplitter, event_data, with_data

CALL = b'{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"echo","arguments":{"message":"hi"}}}'
INITIALIZE = (
    b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25",'
    b'"capabilities":{},"clientInfo":{"name":"claude-ai","version":"0.1.0"}}}'
)


def test_a_message_that_names_no_method_the_proxy_acts_on_is_not_parsed() -> None:
    for raw in (
        b'{"jsonrpc":"2.0","id":3,"method":"tools/list"}',
        b'{"jsonrpc":"2.0","method":"notifications/initialized"}',
        b'{"jsonrpc":"2.0","id":0,"result":{"role":"assistant","content":{"type":"text","text":"x"}}}',
        b"not json at all",
    ):
        assert read_client(raw) is None


def test_a_tools_call_is_read_with_its_id_name_and_arguments() -> None:
    body = read_client(CALL)
    assert body is not None
    assert not body.batch
    (message,) = body.messages
    assert message.raw == CALL
    call = message.call
    assert call is not None
    assert (call.id, call.key, call.name, call.arguments, call.task) == (
        4,
        b"4",
        "echo",
        {"message": "hi"},
        False,
    )


def test_string_and_number_ids_are_different_keys() -> None:
    assert id_key(1) != id_key("1")
    string_id = CALL.replace(b'"id":4', b'"id":"4"')
    body = read_client(string_id)
    assert body is not None
    assert body.messages[0].call is not None
    assert body.messages[0].call.key == b'"4"'


def test_a_call_without_arguments_has_empty_params_and_its_meta_can_name_the_client() -> None:
    raw = (
        b'{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"ping","_meta":'
        b'{"io.modelcontextprotocol/clientInfo":{"name":"cursor","version":"3"}},"task":{"ttl":5}}}'
    )
    body = read_client(raw)
    assert body is not None
    call = body.messages[0].call
    assert call is not None
    assert (call.arguments, call.client_name, call.task) == ({}, "cursor", True)


def test_a_call_whose_name_is_not_a_string_is_left_to_the_server() -> None:
    assert read_client(b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":5}}') is None
    assert read_client(b'{"jsonrpc":"2.0","method":"tools/call","params":{"name":"x"}}') is None  # no id


def test_initialize_gives_the_client_name_and_a_cancellation_the_request_key() -> None:
    body = read_client(INITIALIZE)
    assert body is not None
    assert body.messages[0].client_name == "claude-ai"
    cancel = b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"x-1","reason":"t"}}'
    body = read_client(cancel)
    assert body is not None
    assert body.messages[0].cancelled == b'"x-1"'


def test_a_batch_is_split_into_its_members_own_bytes() -> None:
    other = b'{ "jsonrpc": "2.0", "id": 9, "method": "tools/list" }'
    raw = b"[" + other + b" ,\n " + CALL + b"]"
    body = read_client(raw)
    assert body is not None
    assert body.batch
    assert [m.raw for m in body.messages] == [other, CALL]
    assert body.messages[0].call is None
    assert body.messages[1].call is not None


def test_answer_keys_are_the_responses_ids_not_the_requests_or_notifications() -> None:
    assert answer_keys(b'{"result":{"content":[]},"jsonrpc":"2.0","id":5}') == [b"5"]
    assert answer_keys(b'{"method":"sampling/createMessage","params":{},"jsonrpc":"2.0","id":0}') == []
    assert answer_keys(b'{"method":"notifications/progress","params":{"progress":1,"progressToken":5}}') == []
    batch = b'[{"id":"a","result":{}},{"id":"b","error":{"code":1,"message":"m"}},{"id":1,"method":"ping"}]'
    assert answer_keys(batch) == [b'"a"', b'"b"']
    assert answer_keys(b"{oops") == []


def test_read_server_finds_only_the_answers_waited_for() -> None:
    answer = b'{"result":{"content":[{"type":"text","text":"Echo: hi"}]},"jsonrpc":"2.0","id":4}'
    assert read_server(answer, {b"5"}) is None
    body = read_server(answer, {b"4"})
    assert body is not None
    assert body.answers[b"4"][1]["result"]["content"][0]["text"] == "Echo: hi"
    assert body.encoded() is None  # nothing changed: the bytes go on as they came


def test_a_changed_member_of_a_batch_is_the_only_one_re_encoded() -> None:
    first = b'{"jsonrpc":"2.0", "id":1, "result":{"tools":[]}}'
    second = b'{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"x"}]}}'
    body = read_server(b"[" + first + b", " + second + b"]", {b"2"})
    assert body is not None
    noted = with_note(body.answers[b"2"][1], "careful")
    assert noted is not None
    body.replace(b"2", noted)
    encoded = body.encoded()
    assert encoded is not None
    assert encoded.startswith(b"[" + first + b",")
    assert json.loads(encoded)[1]["result"]["content"] == [
        {"type": "text", "text": "x"},
        {"type": "text", "text": "careful"},
    ]


def test_tool_error_is_a_tool_result_with_is_error_for_the_same_id() -> None:
    for request_id in (7, "abc", "ünï"):
        answer = json.loads(tool_error(request_id, "loopwatch blocked this call"))
        assert answer == {
            "jsonrpc": "2.0",
            "id": request_id,
            "result": {"content": [{"type": "text", "text": "loopwatch blocked this call"}], "isError": True},
        }


def test_a_note_goes_after_the_content_or_the_error_message() -> None:
    result = {"jsonrpc": "2.0", "id": 1, "result": {"content": [], "structuredContent": {"a": 1}}}
    noted = with_note(result, "n")
    assert noted == {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {"content": [{"type": "text", "text": "n"}], "structuredContent": {"a": 1}},
    }
    assert result["result"] == {"content": [], "structuredContent": {"a": 1}}  # not changed in place
    error = {"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": "Unknown tool"}}
    assert with_note(error, "n") == {
        "jsonrpc": "2.0",
        "id": 1,
        "error": {"code": -32602, "message": "Unknown tool\n\nn"},
    }
    assert with_note({"jsonrpc": "2.0", "id": 1, "result": {"task": {"taskId": "t"}}}, "n") is None


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ({"result": {"content": [{"type": "text", "text": "ok"}]}}, ([{"type": "text", "text": "ok"}], None)),
        (
            {
                "result": {
                    "content": [{"type": "text", "text": "ENOENT"}, {"type": "text", "text": "x"}],
                    "isError": True,
                }
            },
            (MISSING, "ENOENT\nx"),
        ),
        ({"result": {"content": [], "isError": True}}, (MISSING, "tool call failed")),
        ({"error": {"code": -32602, "message": "Tool nope not found"}}, (MISSING, "Tool nope not found")),
        ({"result": {"structuredContent": {"t": 1}}}, ({"structuredContent": {"t": 1}}, None)),
        ({"result": {"task": {"taskId": "t-1", "status": "working"}}}, None),
    ],
)
def test_outcome_is_what_the_model_reads_or_the_failure(answer: dict[str, object], expected: object) -> None:
    assert outcome(answer) == expected


def test_lines_are_kept_whole_across_chunks() -> None:
    stream = b'{"a":1}\n{"b":"\xc3\xa9"}\r\n\n{"c":3}'
    for cut in range(len(stream) + 1):
        lines = LineSplitter()
        got = lines.feed(stream[:cut]) + lines.feed(stream[cut:])
        assert got == [b'{"a":1}\n', b'{"b":"\xc3\xa9"}\r\n', b"\n"]
        assert lines.rest() == b'{"c":3}'


def test_sse_events_are_kept_byte_for_byte_across_chunks() -> None:
    stream = b'id: 1\nevent: message\ndata: {"x":1}\n\n: a comment\r\ndata: a\r\ndata:b\r\n\r\ndata: cut'
    for cut in range(len(stream) + 1):
        events = EventSplitter()
        got = events.feed(stream[:cut]) + events.feed(stream[cut:])
        assert got == [
            b'id: 1\nevent: message\ndata: {"x":1}\n\n',
            b": a comment\r\ndata: a\r\ndata:b\r\n\r\n",
        ]
        assert events.rest() == b"data: cut"


def test_sse_data_and_new_data_keep_the_other_fields() -> None:
    assert event_data(b'id: 1\nevent: message\ndata: {"x":1}\n\n') == b'{"x":1}'
    assert event_data(b"data: a\r\ndata:b\r\ndata\r\n\r\n") == b"a\nb\n"
    assert event_data(b"id: 7\n\n") is None
    assert with_data(b'id: 1\nevent: message\ndata: {"x":1}\nretry: 5\n\n', b"{}") == (
        b"id: 1\nevent: message\ndata: {}\nretry: 5\n\n"
    )
    assert with_data(b"data: a\r\ndata: b\r\nid: 2\r\n\r\n", b"c") == b"data: c\nid: 2\n\n"
