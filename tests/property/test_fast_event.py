"""``raw_json.fast_event``: a common call or result read in C straight into its Struct.

Where it answers, it must give exactly the event ``decode_event(data, texts=True)`` gives
without it (msgspec reads the event, ``validate_event`` checks it): the same type and every
field equal (``params`` and ``result`` as the same JSON text). Where that path refuses the
event, it must not answer. It may decline anything (``None``): the whole path then reads it.
Checked on the built module and on a portable build (no SIMD), over events generated field by
field around every rule of its shape, and over arbitrary bytes.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

import msgspec
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from loopwatch.detectors.decoding import _decode_whole, decode_event
from loopwatch.detectors.events import InvalidEvent, ToolCall, ToolResult
from tests.native_modules import built_module, portable_module
from tests.property.strategies import edge_json_values

BUILT = built_module("_raw_json")
PORTABLE = portable_module("_raw_json", Path(tempfile.mkdtemp(prefix="loopwatch-portable-")))
for _module in (BUILT, PORTABLE):
    _module.bind_events(ToolCall, ToolResult, msgspec.Raw)
MODULES = pytest.mark.parametrize("native", [BUILT, PORTABLE], ids=["built", "portable"])


def _whole(data: bytes) -> Any:
    """What decode_event gives without the C reader: the event, or the reason it refuses."""
    try:
        return _decode_whole(data, True)
    except InvalidEvent as exc:
        return exc


def _agrees(native: ModuleType, data: bytes) -> Any:
    fast = native.fast_event(data)
    whole = _whole(data)
    if fast is not None:
        assert not isinstance(whole, InvalidEvent), (data, whole)
        assert type(fast) is type(whole)
        assert fast == whole, (data, fast, whole)
    return fast


# ids: plain ASCII (what it reads), and what it must leave to the whole path
_IDS = st.one_of(
    st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7F), max_size=12),
    st.sampled_from(
        ["", " ", "   ", "run 1", " r", "\x7f", "a" * 512, "a" * 513, "é", "\\", '"', "\t", "\U0001f600"]
    ),
)
_TS = st.one_of(
    st.none(),
    st.integers(-(10**16), 10**16),
    st.sampled_from([0, -1, 10**15 - 1, 10**15, -(10**15), 2**63 - 1, 2**63, 1.5, -0.0, True, "1"]),
)
_JSON = edge_json_values(
    st.text(max_size=8) | st.sampled_from(["\ud800", "\\", '"', "\x00"]), st.text(max_size=4), finite=False
)
_TYPES = st.sampled_from(["tool_call", "tool_result", "compaction_retry", "run_end", "tool", "", None])
_OPTIONAL = st.fixed_dictionaries(
    {},
    optional={
        "run_id": st.one_of(_IDS, st.none()),
        "session_id": st.one_of(_IDS, st.none()),
        "agent_id": st.one_of(_IDS, st.none()),
        "ts": _TS,
        "tool_call_id": st.one_of(_IDS, st.none(), st.integers()),
        "known_poll": st.one_of(st.booleans(), st.none(), st.integers(0, 1)),
        "result": _JSON,
        "error": st.one_of(st.text(max_size=5), st.none()),
        "result_digest": st.one_of(st.text(max_size=5), st.none()),
        "args_digest": st.text(max_size=5),
        "usage": st.just({"input_tokens": 1}),
        "depth": st.integers(0, 3),
        "unknown": st.integers(),
    },
)


_PLAIN_IDS = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=1, max_size=12)
_SIMPLE_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)


def _often(draw: st.DrawFn, common: st.SearchStrategy[Any], rare: st.SearchStrategy[Any]) -> Any:
    """Mostly the common shape, now and then anything around it."""
    return draw(common if draw(st.integers(0, 9)) else rare)


@st.composite
def _events(draw: st.DrawFn) -> bytes:
    """Events around the reader's shape: mostly its own, each rule of it now and then broken."""
    event: dict[str, Any] = {}
    kind = _often(draw, st.sampled_from(["tool_call", "tool_result"]), _TYPES)
    if kind is not None:
        event["type"] = kind
    for name in ("event_id", "tool", "run_id"):
        if draw(st.integers(0, 19)):
            event[name] = _often(draw, _PLAIN_IDS, _IDS)
    if draw(st.integers(0, 19)):
        event["params"] = _often(draw, _SIMPLE_JSON, _JSON)
    if kind == "tool_result" and draw(st.integers(0, 19)):
        event["result"] = _often(draw, _SIMPLE_JSON, _JSON)
    if not draw(st.integers(0, 3)):
        event.update(draw(_OPTIONAL))
    members = list(event.items())
    members = draw(st.permutations(members))
    if members and draw(st.integers(0, 19)) == 0:  # a key given twice
        members.append(draw(st.sampled_from(members)))
    styles: list[dict[str, Any]] = [{"separators": (",", ":")}, {}, {"indent": 1}, {"ensure_ascii": False}]
    style = draw(st.sampled_from(styles))
    text = "{" + ",".join(f"{json.dumps(key)}:{json.dumps(value, **style)}" for key, value in members) + "}"
    if draw(st.booleans()):
        text = text.replace(":", " : ", 1) + "\n"
    return text.encode("utf-8", "surrogatepass")


_COMMON = (
    b'{"type":"tool_result","run_id":"run-0000","tool_call_id":"call-1","tool":"read",'
    b'"params":{"path":"/a","offset":3},"result":{"content":[{"type":"text","text":"x"}]},"event_id":"e1"}'
)


@MODULES
@given(data=_events())
@settings(max_examples=600)
@example(data=_COMMON)
@example(data=b'{"run_id":"r","event_id":"e","tool":"t","params":{},"ts":-0,"type":"tool_call"}')
@example(data=b'{"type":"tool_call","session_id":"s","run_id":"   ","event_id":"e","tool":"t","params":[]}')
@example(data=b'{"type":"tool_call","run_id":"r","event_id":"e","tool":"t","params":1,"known_poll":true}')
@example(
    data=b'{"type":"tool_call","run_id":"r","event_id":"e","tool":"' + b"{" * 65 + b'","params":{"a":1}}'
)
@example(
    data=b'{"type":"tool_call","run_id":"r","event_id":"e","tool":"t","params":[' + b"[]," * 64 + b"[]]}"
)
@example(data=b'{"type":"tool_call","run_id":"r","event_id":"e","tool":"t","params":"' + b"[" * 3000 + b'"}')
@example(  # 32 deep, in a line split_event declines (it reads params one level down)
    data=b'{"type":"tool_result","run_id":"r","event_id":"e","tool":"t","params":'
    + b"[" * 32
    + b"]" * 32
    + b',"result":"'
    + b"p" * 2100
    + b'"}'
)
def test_it_gives_the_event_the_whole_path_gives(native: ModuleType, data: bytes) -> None:
    _agrees(native, data)


@MODULES
def test_the_common_shapes_are_its_own(native: ModuleType) -> None:
    """Not a reader that declines everything: the shapes of every workload and hook it reads."""
    for data in (
        _COMMON,
        _COMMON.replace(b'"run_id":"run-0000"', b'"session_id":"s-1","ts":1733400000123,"agent_id":"main"'),
        b'{"type":"tool_call","run_id":"r","tool_call_id":null,"tool":"exec","params":{"command":"ls"},'
        b'"event_id":"e2","known_poll":false,"ts":null}',
        b' { "type" : "tool_call" , "run_id" : "r" , "tool" : "t" , '
        b'"params" : "\\u00e9" , "event_id" : "e" } ',
    ):
        assert _agrees(native, data) is not None, data


@MODULES
def test_it_declines_what_it_cannot_be_sure_of(native: ModuleType) -> None:
    call = {"type": "tool_call", "run_id": "r", "event_id": "e", "tool": "t", "params": {}}
    for change in (
        {"run_id": "r\\u0031"},  # an escape in an id
        {"run_id": "é"},  # beyond ASCII
        {"event_id": "a" * 513},  # over the id limit: the whole path names the limit
        {"ts": 10**15},  # 16 digits
        {"ts": 1.0},
        {"agent_id": None},
        {"known_poll": 1},
        {"result": 1},  # a call with a result: msgspec ignores the member, this reader does not know it
        {"args_digest": "x"},
        {"depth": 1},
        {"type": "run_end"},
    ):
        data = json.dumps({**call, **change}).replace("\\\\u0031", "\\u0031").encode()
        assert native.fast_event(data) is None, data
    assert (
        native.fast_event(
            b'{"type":"tool_call","type":"tool_call","run_id":"r","event_id":"e","tool":"t","params":1}'
        )
        is None
    )
    assert (
        native.fast_event(b'{"type":"tool_call","run_id":"r","event_id":"e","tool":"t","params":"\\ud800"}')
        is None
    )
    assert (
        native.fast_event(b'{"type":"tool_call","run_id":"r","event_id":"e","tool":"t","params":"\xff"}')
        is None
    )
    assert native.fast_event("{}") is None  # (only bytes)


@MODULES
@given(
    st.binary(max_size=80)
    | st.lists(st.sampled_from(list(b'{}[]":, \\u0123456789abcdeftrunl-\x00\x80\xc3\xa9')), max_size=80).map(
        bytes
    )
    | _events().map(lambda data: data[: len(data) // 2])
)
def test_no_bytes_crash_it(native: ModuleType, data: bytes) -> None:
    _agrees(native, data)


def test_decode_event_reads_the_common_shape_with_it() -> None:
    event = decode_event(_COMMON, texts=True)
    assert event == _decode_whole(_COMMON, True)
    assert decode_event(_COMMON) == _decode_whole(_COMMON, False)  # (values: the whole path)


_PIECES = [*'{}[]":,0123456789-+.eE \\/ubfnrtal', "\\u00e9", "\\ud83d\\ude00", "\\ud800", "é", "\x1f"]


@st.composite
def _jsonish(draw: st.DrawFn) -> str:
    """JSON text, half of it with one piece put in, replaced or taken out somewhere."""
    text = json.dumps(draw(_often_json), ensure_ascii=draw(st.booleans()))
    if draw(st.booleans()):
        at = draw(st.integers(0, len(text)))
        cut = draw(st.integers(0, 1))
        text = text[:at] + draw(st.sampled_from(["", *_PIECES])) + text[at + cut :]
    return text


_often_json = st.one_of(_SIMPLE_JSON, _JSON)
_JSONISH = _jsonish()


@MODULES
@given(params=_JSONISH, result=_JSONISH)
@settings(max_examples=400)
@example(params='{"a":[1,-0,2.5e3,{"b":"\\ud83d\\ude00"}]}', result='"x"')
@example(params='{"a" 1}', result="1")
@example(params='"\\x"', result="1")  # an escape JSON does not have
@example(params='"\\u12"', result="1")
@example(params='{"\\udc00":1}', result="1")  # a lone low surrogate, in a key
@example(params='"\x01"', result="1")  # a control character
@example(params="[" * 33 + "]" * 33, result="1")  # deeper than its MAX_DEPTH: the whole path reads it
def test_its_check_of_params_and_result_is_msgspec_s(native: ModuleType, params: str, result: str) -> None:
    """Any text where params and result go: answered only where msgspec takes it too."""
    data = (
        f'{{"type":"tool_result","run_id":"r","event_id":"e","tool":"t","params":{params},"result":{result}}}'
    ).encode("utf-8", "surrogatepass")
    _agrees(native, data)
