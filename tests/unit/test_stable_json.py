import math

import pytest

from loopwatch.detectors.stable_json import (
    UNDEFINED,
    WIRE_DECODER,
    JSNumber,
    canonical_bytes,
    from_python,
    js_number_text,
    js_string,
    stable_stringify,
)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1.0, "1"),
        (1e21, "1e+21"),
        (1e-7, "1e-7"),
        (1.5e-7, "1.5e-7"),
        (0.000001, "0.000001"),
        (0.1, "0.1"),
        (-2.5, "-2.5"),
        (1e16, "10000000000000000"),
        (12345678901234567890.0, "12345678901234567000"),
        (1.7976931348623157e308, "1.7976931348623157e+308"),
        (5e-324, "5e-324"),
        (-0.0, "0"),
        (math.nan, "NaN"),
        (math.inf, "Infinity"),
        (-math.inf, "-Infinity"),
    ],
)
def test_number_text_is_javascripts(value: float, text: str) -> None:
    assert js_number_text(value) == text


def test_string_escapes_follow_json_stringify() -> None:
    assert js_string('a"b\\c\n\t\x01\x7f\u2028é') == '"a\\"b\\\\c\\n\\t\\u0001\x7f\u2028é"'


def test_lone_surrogates_are_replaced_and_pairs_joined() -> None:
    assert js_string("x\ud800y") == '"x\ufffdy"'
    assert js_string("\ud83d\ude00") == '"\U0001f600"'


def test_objects_sort_keys_by_utf16_code_units() -> None:
    # U+FF5E sorts after U+1F600 in code points but before it in UTF-16 code units
    value = {"\U0001f600": 1, "\uff5e": 2, "a": 3}
    assert stable_stringify(value) == '{"a":3,"\U0001f600":1,"\uff5e":2}'
    assert canonical_bytes(value) == stable_stringify(value).encode()


def test_undefined_non_finite_cycles() -> None:
    cyclic: list[object] = [1]
    cyclic.append(cyclic)
    assert stable_stringify({"a": UNDEFINED, "b": math.inf}) == '{"a":undefined,"b":"Infinity"}'
    assert stable_stringify(cyclic) == '[1,"[Circular]"]'
    shared = [1]
    assert stable_stringify([shared, shared]) == "[[1],[1]]"


def test_wire_decoder_gives_javascript_numbers() -> None:
    value = WIRE_DECODER.decode(b'{"a":1.0,"b":1.5,"c":1e400,"d":123456789012345678901}')
    assert value["a"] == 1
    assert isinstance(value["a"], int)
    assert value["b"] == JSNumber(1.5)
    assert canonical_bytes(value) == b'{"a":1,"b":1.5,"c":"Infinity","d":123456789012345680000}'


def test_from_python_matches_the_wire() -> None:
    assert canonical_bytes(from_python({"x": (1.0, 2.5)})) == b'{"x":[1,2.5]}'
