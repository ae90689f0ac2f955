"""``_raw_json.c`` (stableStringify straight from JSON text) against its Python twin and the
reference: where the C module answers, it answers what the reference does; hashing an event's
params and results from their text gives what hashing their decoded values gives, for every
tool and rule revision; and no input, however broken, crashes it or passes as valid.

Run on the module ``make setup`` built and on the same source built without SIMD.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

import msgspec
import pytest
import xxhash
from hypothesis import example, given
from hypothesis import strategies as st

from loopwatch.detectors.decoding import _decode_whole, decode_event
from loopwatch.detectors.events import InvalidEvent, ToolCall, ToolResult
from loopwatch.detectors.hashing import digester_for
from loopwatch.detectors.outcomes import MISSING, content_text, hash_outcome
from loopwatch.detectors.raw_json import MAX_DEPTH, python_canonical, python_outcome, python_utf8_valid
from loopwatch.detectors.stable_json import WIRE_DECODER, plain, stable_stringify
from loopwatch.detectors.step import prepare
from tests.native_modules import built_module, portable_module
from tests.property.strategies import edge_json_values, json_values

BUILT = built_module("_raw_json")
PORTABLE = portable_module("_raw_json", Path(tempfile.mkdtemp(prefix="loopwatch-portable-")))
MODULES = pytest.mark.parametrize("native", [BUILT, PORTABLE], ids=["built", "portable"])

_KEYS = st.text(
    alphabet=st.sampled_from('ab"\\/\n\x01\x7f\u00e9\u0100\u2028\ue000\uffff\U0001f600 '), max_size=3
)
_TEXTS = st.text() | st.sampled_from([" \u3000hi\ufeff ", "\U0001f600", "\u2028", "\x1f\b\f\t\r", "", "  "])
_VALUES = edge_json_values(_TEXTS, _KEYS, finite=True)
#: JSON texts of a value, as different clients write them
_STYLES = st.sampled_from(
    [
        {"ensure_ascii": False, "separators": (",", ":")},
        {"ensure_ascii": True, "separators": (", ", ": ")},
        {"ensure_ascii": True, "indent": 1},
        {"ensure_ascii": False, "sort_keys": True},
    ]
)


def _text(value: Any, style: dict[str, Any]) -> bytes:
    return json.dumps(value, **style).encode("utf-8", "surrogatepass")


def _reference(raw: bytes) -> bytes:
    return stable_stringify(WIRE_DECODER.decode(raw)).encode()


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(item) for item in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(item) for item in value), default=0)
    return 0


def _claimed(value: Any) -> bool:
    """Whether the C module must answer for a value written by json.dumps (see _raw_json.c)."""
    if isinstance(value, float):
        return False  # (json.dumps writes a fraction or an exponent)
    if isinstance(value, bool) or value is None:
        return True
    if isinstance(value, int):
        return abs(value) <= 2**53
    if isinstance(value, str):
        return True
    if isinstance(value, list):
        return all(_claimed(item) for item in value)
    return all(all(ord(c) < 0x10000 for c in key) for key in value) and all(
        _claimed(item) for item in value.values()
    )


@MODULES
@given(value=st.one_of(json_values, _VALUES), style=_STYLES)
@example(value={"b": 1, "a": [1, {"\u00e9": 2, "e": 3, "\uffff": 4}]}, style={})
@example(value={"a": 1, "a ": 2, "": [-0, 2**53, -(2**53)]}, style={"indent": 2})
@example(value={str(n): n for n in range(40)}, style={})  # more members than the small sort
def test_canonical_is_stable_stringify(native: ModuleType, value: Any, style: dict[str, Any]) -> None:
    raw = _text(value, style)
    expected = _reference(raw)
    answer = native.canonical(raw)
    assert answer is None or answer == expected
    hashed = native.args_hash("read", raw)
    assert hashed == (None if answer is None else f"read:{xxhash.xxh3_128_hexdigest(answer)}")
    if _claimed(value) and _depth(value) <= MAX_DEPTH:
        assert answer == expected
    assert python_canonical(raw) == (expected if _depth(value) <= MAX_DEPTH else None)


@MODULES
def test_canonical_takes_the_wire_s_own_number_and_escape_texts(native: ModuleType) -> None:
    raw = b'{"z":-0,"y":"\\u00e9\\/\\u0008\\u001f\\ud83d\\ude00","x":9007199254740992,"x":1}'
    assert native.canonical(raw) == _reference(raw) == '{"x":1,"y":"é/\\b\\u001f😀","z":0}'.encode()
    for unsure in (
        b"1.5",
        b"1e3",
        b"9007199254740993",
        b'{"\\ud83d\\ude00":1}',
        b'"\\ud800"',
        b"[" * 40 + b"]" * 40,
    ):
        assert native.canonical(unsure) is None
    for invalid in (b"", b"01", b"[1,]", b'{"a" 1}', b'"\xff"', b'"a\tb"', b"nul", b"[1] x", b'"\\x"', b"1."):
        assert native.canonical(invalid) is None
        assert native.outcome(invalid) is None


def _result(blocks: list[Any], details: Any, extra: dict[str, Any]) -> dict[str, Any]:
    return {**extra, "content": blocks, "details": details}


_BLOCKS = st.lists(
    st.fixed_dictionaries({"type": st.sampled_from(["text", "image"]), "text": _TEXTS})
    | st.fixed_dictionaries({"type": st.just("text")})
    | _VALUES,
    max_size=3,
)
_DETAILS = (
    st.fixed_dictionaries(
        {},
        optional={
            "status": st.sampled_from(["blocked", "completed", "failed", "running", "ok"]),
            "deniedReason": st.sampled_from(["tool-loop", "policy"]),
            "changed": st.booleans(),
            "exitCode": st.sampled_from([0, 1, 2, -1, 2.5, 1e3, None, True, "1", 2**53, 2**53 + 2]),
            "timedOut": st.booleans(),
            "aggregated": _TEXTS
            | st.sampled_from(["(Command exited with code 1)", "make: *** [x] Error 2 12:00:01"]),
            "action": st.sampled_from(["poll", "log", "send"]),
            "messageId": st.text(max_size=3),
        },
    )
    | _VALUES
)
_RESULTS = st.one_of(
    st.builds(
        _result, _BLOCKS, _DETAILS, st.dictionaries(st.sampled_from(["x", "content", "details"]), _VALUES)
    ),
    _VALUES,
)


@MODULES
@given(result=_RESULTS, style=_STYLES)
@example(result=_result([{"type": "text", "text": " a "}, {"type": "t", "text": "b\n"}], {}, {}), style={})
@example(
    result=_result([{"type": "text", "text": "x"}], {"status": "blocked", "deniedReason": "tool-loop"}, {}),
    style={},
)
def test_outcome_is_the_general_outcome(native: ModuleType, result: Any, style: dict[str, Any]) -> None:
    raw = _text(result, style)
    value = WIRE_DECODER.decode(raw)
    twin = python_outcome(raw)
    if _depth(value) > MAX_DEPTH:
        assert twin is None
        return
    if isinstance(value, dict):
        given = value.get("details")
        details: dict[str, Any] = given if isinstance(given, dict) else {}
        hashed = stable_stringify({"details": details, "text": content_text(value)}).encode()
        veto = details.get("status") == "blocked" and details.get("deniedReason") == "tool-loop"
        assert twin == (hashed, True, veto, details.get("changed") is False)
    else:
        assert twin == (stable_stringify(value).encode(), False, False, False)
    answer = native.outcome(raw)
    assert answer is None or answer == twin
    hashed = native.outcome_hash(raw)
    if answer is None or (answer[1] and (answer[2] or answer[3])):  # unsure, or details that say more
        assert hashed is None
    else:
        assert hashed == xxhash.xxh3_128_hexdigest(answer[0])


_TOOLS = st.sampled_from(
    ["read", "exec", "process", "write", "message", "sessions_send", "update_plan", "slack"]
)
_PARAMS = st.one_of(
    _VALUES,
    st.fixed_dictionaries(
        {"action": st.sampled_from(["poll", "log", "send", "read"])}, optional={"x": _VALUES}
    ),
)


@given(
    tool=_TOOLS,
    params=_PARAMS,
    result=_RESULTS,
    style=_STYLES,
    revision=st.sampled_from(["2026-05", "2026-08"]),
)
def test_a_result_hashes_from_its_text_as_from_its_value(
    tool: str, params: Any, result: Any, style: dict[str, Any], revision: Any
) -> None:
    raw_params, raw_result = msgspec.Raw(_text(params, style)), msgspec.Raw(_text(result, style))
    digester = digester_for("xxh3")
    sends = frozenset({"slack"})
    from_text = hash_outcome(tool, raw_params, raw_result, MISSING, digester, sends, revision)
    assert from_text == hash_outcome(
        tool, plain(raw_params), plain(raw_result), MISSING, digester, sends, revision
    )


@given(tool=_TOOLS, params=_PARAMS, result=_RESULTS, revision=st.sampled_from(["2026-05", "2026-08"]))
def test_an_event_decoded_with_its_texts_prepares_as_with_its_values(
    tool: str, params: Any, result: Any, revision: Any
) -> None:
    digester = digester_for("xxh3")
    base = {"run_id": "r", "tool": tool, "params": params, "tool_call_id": "c"}
    lines = [
        json.dumps({"type": "tool_call", "event_id": "e1", **base}).encode(),
        json.dumps({"type": "tool_result", "event_id": "e2", "result": result, **base}).encode(),
    ]
    for line in lines:
        texts, values = decode_event(line, texts=True), decode_event(line)
        assert isinstance(texts, (ToolCall, ToolResult))
        assert isinstance(values, (ToolCall, ToolResult))
        assert type(texts.params) is msgspec.Raw
        first = prepare(texts, digester, frozenset(), revision)
        second = prepare(values, digester, frozenset(), revision)
        assert vars_of(first) == vars_of(second)


_PREPARED = (
    "args_hash",
    "known_poll",
    "result_hash",
    "unknown_tool_name",
    "kind",
    "no_progress",
    "failure_id",
)


def vars_of(prepared: Any) -> tuple[Any, ...]:
    return tuple(getattr(prepared, name) for name in _PREPARED)


_BROKEN = [
    b'"\xff"',  # not UTF-8
    b'"\xed\xa0\x80"',  # a surrogate written as UTF-8
    b'"\xc0\xaf"',  # an overlong form
    b'"\\ud800"',  # a lone surrogate escape: valid, read as JavaScript reads it
    b"[" * 70 + b"]" * 70,  # deeper than the wire's limit
    b'{"a": [1, 2, {"b": "\xe2\x82"}]}',  # a cut sequence
]


@pytest.mark.parametrize("broken", _BROKEN)
def test_a_text_msgspec_only_skipped_is_judged_as_its_value_is(broken: bytes) -> None:
    line = b'{"type":"tool_call","event_id":"e","run_id":"r","tool":"t","params":' + broken + b"}"
    try:
        expected: Any = plain(decode_event(line).params)  # type: ignore[union-attr]
    except InvalidEvent as exc:
        expected = exc.reason
    try:
        answer: Any = plain(decode_event(line, texts=True).params)  # type: ignore[union-attr]
    except InvalidEvent as exc:
        answer = exc.reason
    assert answer == expected


@MODULES
@given(
    st.binary(max_size=60)
    | st.lists(
        st.sampled_from(list(b'{}[]":,\\u0123456789abcdeftrunl -\x00\x80\xc3\xa9\xf0\x9f\xed')), max_size=60
    ).map(bytes)
)
def test_no_bytes_crash_it_or_pass_as_valid_json(native: ModuleType, data: bytes) -> None:
    try:
        WIRE_DECODER.decode(data)
        valid = True
    except (msgspec.DecodeError, RecursionError):
        valid = False
    if not valid:
        assert native.canonical(data) is None
        assert native.outcome(data) is None
    else:
        answer = native.canonical(data)
        assert answer is None or answer == _reference(data)
    assert native.utf8_valid(data) == python_utf8_valid(data)


@MODULES
@pytest.mark.parametrize("size", [0, 1, 100, 2000, 2048, 2049, 5000, 70000])  # around LONG_TEXT
@pytest.mark.parametrize("tool", ["read", "r\u00e9ad", "\U0001f600", ""])
def test_digests_from_text_are_xxhash_s_at_every_length(native: ModuleType, size: int, tool: str) -> None:
    raw = json.dumps({"text": "x" * size, "details": {"b": "\u00e9", "a": 1}}).encode()
    assert native.args_hash(tool, raw) == f"{tool}:{xxhash.xxh3_128_hexdigest(native.canonical(raw))}"
    assert native.outcome_hash(raw) == xxhash.xxh3_128_hexdigest(native.outcome(raw)[0])
    assert native.args_hash(tool, b"[1,]") is None
    assert native.outcome_hash(b'{"details":{"status":"blocked","deniedReason":"tool-loop"}}') is None
    assert native.outcome_hash(b'{"details":{"changed":false}}') is None
    assert native.outcome_hash(b"[1]") == xxhash.xxh3_128_hexdigest(b"[1]")
    with pytest.raises(TypeError, match="takes a tool name"):
        native.args_hash(b"read", raw)
    with pytest.raises(TypeError, match="takes a tool name"):
        native.args_hash("read")


@MODULES
def test_it_reads_buffers_and_refuses_other_objects(native: ModuleType) -> None:
    assert native.canonical(msgspec.Raw(b'{"b":1,"a":2}')) == b'{"a":2,"b":1}'
    assert native.canonical(memoryview(b"[1]")) == b"[1]"
    with pytest.raises(TypeError):
        native.canonical("[1]")


_MEMBERS = st.lists(
    st.tuples(st.sampled_from(["params", "result", "tool", "x", "ré", "p\\u0061rams"]), _VALUES), max_size=6
)


def _key(key: str) -> str:
    """A key as JSON (one with a backslash as written: its escape stays in the text)."""
    return '"' + key + '"' if "\\" in key else json.dumps(key)


@MODULES
@given(members=_MEMBERS, style=_STYLES)
@example(members=[("params", 1), ("result", [2]), ("params", {"a": "b"})], style={"indent": 1})
def test_split_event_cuts_out_the_last_params_and_result(
    native: ModuleType, members: list[tuple[str, Any]], style: dict[str, Any]
) -> None:
    body = ",".join(
        f"{_key(key)}:{_text(value, style).decode('utf-8', 'surrogatepass')}" for key, value in members
    )
    data = ("{" + body + "}").encode("utf-8", "surrogatepass")
    split = native.split_event(data)
    if any("\\" in key or not key.isascii() for key, _ in members) or any(
        _depth(v) >= MAX_DEPTH for _, v in members
    ):
        assert split is None
        return
    try:
        whole = json.loads(data)
    except ValueError:  # a lone surrogate the C side refuses
        assert split is None
        return
    assert split is not None
    envelope, params_start, params_end, result_start, result_end = split
    expected = {**whole, **{key: None for key in ("params", "result") if key in whole}}
    assert json.loads(envelope) == expected
    for key, start, end in (("params", params_start, params_end), ("result", result_start, result_end)):
        if key in whole:
            assert json.loads(data[start:end]) == whole[key]
        else:
            assert (start, end) == (-1, -1)


@MODULES
def test_split_event_refuses_what_it_cannot_say(native: ModuleType) -> None:
    for data in (b"[1]", b'{"a":1', b'{"a":1} x', b'{"a":"\xff"}', b'{"params":[1,]}', b"", b'{"a" 1}'):
        assert native.split_event(data) is None
    assert native.split_event(b" { } ") == (b" { } ", -1, -1, -1, -1)


@given(params=_VALUES, result=_RESULTS, tool=_TOOLS, pad=st.integers(0, 3000))
def test_a_long_event_decodes_as_a_short_one(params: Any, result: Any, tool: str, pad: int) -> None:
    """Past ``SPLIT_ABOVE`` bytes, ``texts`` decoding cuts params and result out first: the
    event, and what it hashes to, are those of the whole event read by msgspec."""
    line = json.dumps(
        {
            "type": "tool_result",
            "event_id": "e",
            "run_id": "r",
            "tool": tool,
            "params": params,
            "result": result,
            "x": "p" * pad,
        }
    ).encode()
    texts, values = decode_event(line, texts=True), decode_event(line)
    assert isinstance(texts, ToolResult)
    assert isinstance(values, ToolResult)
    assert (plain(texts.params), plain(texts.result)) == (values.params, values.result)
    assert msgspec.structs.replace(texts, params=None, result=None) == msgspec.structs.replace(
        values, params=None, result=None
    )
    digester = digester_for("xxh3")
    assert vars_of(prepare(texts, digester, frozenset(), "2026-08")) == vars_of(
        prepare(values, digester, frozenset(), "2026-08")
    )


def test_a_long_invalid_event_says_what_a_short_one_says() -> None:
    pad = "p" * 3000
    for bad in (
        {"type": "tool_call", "event_id": "e", "run_id": "r", "params": {"a": pad}},  # no tool
        {"type": "tool_call", "event_id": "e", "run_id": "r", "tool": 5, "params": pad},
        {"type": "tool_result", "event_id": "e", "run_id": "r", "tool": "t", "params": pad},  # no outcome
    ):
        line = json.dumps(bad).encode()
        with pytest.raises(InvalidEvent) as texts:
            decode_event(line, texts=True)
        with pytest.raises(InvalidEvent) as values:
            decode_event(line)
        assert texts.value.reason == values.value.reason


_FINISHED = st.fixed_dictionaries(
    {"status": st.sampled_from(["completed", "failed"])},
    optional={
        "exitCode": st.sampled_from([0, 1, 2, -1, -0, 2.5, 1e3, None, True, "1", 2**53, 2**53 + 2]),
        "timedOut": st.booleans() | st.sampled_from([1, "true", None]),
        "aggregated": _TEXTS | st.sampled_from(["(Command exited with code 1)", "x 12:00:01 (pid 42)", "  "]),
        "durationMs": st.integers(0, 10**6),
    },
)


@given(
    details=_FINISHED,
    blocks=_BLOCKS,
    style=_STYLES,
    revision=st.sampled_from(["2026-05", "2026-08"]),
)
@example(
    details={"status": "failed", "exitCode": 1, "timedOut": False, "aggregated": "boom"},
    blocks=[],
    style={},
    revision="2026-08",
)
@example(
    details={"status": "completed", "exitCode": 2, "aggregated": "  "},
    blocks=[{"type": "text", "text": "(Command exited with code 2)"}],
    style={},
    revision="2026-08",
)
def test_a_finished_exec_hashes_from_its_text_as_from_its_value(
    details: dict[str, Any], blocks: list[Any], style: dict[str, Any], revision: Any
) -> None:
    raw = msgspec.Raw(_text(_result(blocks, details, {}), style))
    for digest in ("sha256", "xxh3"):  # (xxh3: exec_hash's digest where it is surely no failure)
        digester = digester_for(digest)
        from_text = hash_outcome("exec", {}, raw, MISSING, digester, (), revision)
        assert from_text == hash_outcome("exec", {}, plain(raw), MISSING, digester, (), revision)
    finished = BUILT.exec_outcome(raw)
    if finished is not None:
        assert PORTABLE.exec_outcome(raw) == finished
    for native in (BUILT, PORTABLE):
        hashed = native.exec_hash(raw)
        if finished is None or (finished[2] not in (None, 0) and not finished[3]):  # maybe a failure
            assert hashed is None
        else:
            assert hashed == xxhash.xxh3_128_hexdigest(finished[0])


@pytest.mark.parametrize("texts", [False, True])
def test_invalid_utf8_is_named_with_its_place_whatever_else_is_wrong(texts: bool) -> None:
    """msgspec only skips params and result: where the event is read again to say what is
    wrong, bytes that are no UTF-8 are named first, with their place (a lone surrogate escape
    later in the event made msgspec say the input was truncated)."""
    line = b'{"type":"tool_result","run_id":"r","event_id":"e","tool":"t","params":"\xff","result":"\\ud800"}'
    with pytest.raises(InvalidEvent, match=r"^not valid JSON: invalid UTF-8 at byte 71$"):
        decode_event(line, texts=texts)


@pytest.mark.parametrize("reader", [decode_event, _decode_whole], ids=["decode_event", "whole"])
def test_texts_stay_texts_in_a_line_of_many_brackets(reader: Any) -> None:
    """Over 64 brackets a line's nesting is walked, and ``texts`` still keeps params and
    result as their JSON text (the C reader and the whole path give the same event)."""
    wide: dict[str, Any] = {"type": "tool_result", "event_id": "e", "run_id": "r", "tool": "t"}
    wide.update(params=[[]] * 40, result=[{}] * 40)
    event = reader(json.dumps(wide).encode(), True)
    assert type(event.params) is msgspec.Raw
    assert type(event.result) is msgspec.Raw
    assert (plain(event.params), plain(event.result)) == (wide["params"], wide["result"])
    deep = dict(wide, params=json.loads("[" * 65 + "]" * 65))
    with pytest.raises(InvalidEvent, match="params: nests more than 64 arrays and objects"):
        reader(json.dumps(deep).encode(), True)
