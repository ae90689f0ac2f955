"""Decoding a config object into a msgspec Struct, key by key, every problem with its path.

Rules:

* The Struct is the only declaration: file names (``rename`` / ``name``), types, ``Meta``
  constraints and defaults. Nothing here names a section or a key.
* Each key is converted on its own against its field's type (``msgspec.convert``, strict),
  so every problem is reported at its path (msgspec alone stops at the first), with a message
  written from the field's type: ``must be a positive integer of at most 1000``.
* A field whose type is a Struct is decoded the same way, one level down.
* JSON numbers: an integral float (``3.0``) is the integer ``3``, as in JavaScript.
* An unknown key is a problem (``unknown key (known: ...)``; a Struct's ``member`` ClassVar
  names its keys otherwise); ``refused`` keys get their own message instead.
* A Struct's ``ordered`` ClassVar lists (lower, higher) field pairs: a lower value not below
  the higher one is reported at the lower key, beside the object's other problems (a pair
  with a value of its own problem is not compared; ``ordered=False`` leaves the pairs to the
  caller, e.g. a per-agent object checked once merged over the global one).
* Keys not given keep ``base``'s values (or the Struct's defaults).
"""

from __future__ import annotations

import functools
import math
import types
from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

import msgspec

from loopwatch.config.errors import ConfigProblem

__all__ = ["decode_struct", "describe", "encode_names"]

S = TypeVar("S", bound=msgspec.Struct)

_NO_REFUSALS: Mapping[str, str] = {}


@functools.cache
def _fields(cls: type[msgspec.Struct]) -> dict[str, msgspec.structs.FieldInfo]:
    return {info.encode_name: info for info in msgspec.structs.fields(cls)}


@functools.cache
def encode_names(cls: type[msgspec.Struct]) -> dict[str, str]:
    """Attribute name -> name in files, for every field of ``cls``."""
    return {info.name: info.encode_name for info in msgspec.structs.fields(cls)}


def _struct(tp: object) -> type[msgspec.Struct] | None:
    return tp if isinstance(tp, type) and issubclass(tp, msgspec.Struct) else None


def _unwrap(tp: Any) -> tuple[Any, msgspec.Meta | None]:
    """The type inside ``Annotated[...]`` and its ``Meta``, if any."""
    if get_origin(tp) is Annotated:
        inner, *extras = get_args(tp)
        return inner, next((m for m in extras if isinstance(m, msgspec.Meta)), None)
    return tp, None


def _alternatives(tp: Any) -> tuple[Any, ...]:
    return get_args(tp) if get_origin(tp) in (Union, types.UnionType) else (tp,)


def _bound(number: float) -> str:
    return f"{number:g}"


def _integer(meta: msgspec.Meta | None) -> str:
    low = high = None
    if meta is not None:
        low = int(meta.gt) + 1 if meta.gt is not None else None if meta.ge is None else int(meta.ge)
        high = int(meta.lt) - 1 if meta.lt is not None else None if meta.le is None else int(meta.le)
    if low is None:
        text = "an integer"
    elif low in (0, 1):
        text = "a positive integer" if low == 1 else "a non-negative integer"
    else:
        text = f"an integer of at least {low}"
    return text if high is None else f"{text} of at most {high}"


def _number(meta: msgspec.Meta | None) -> str:
    if meta is None:
        return "a number"
    low = f"above {_bound(meta.gt)}" if meta.gt is not None else None
    low = f"at least {_bound(meta.ge)}" if meta.ge is not None else low
    high = f"below {_bound(meta.lt)}" if meta.lt is not None else None
    high = f"at most {_bound(meta.le)}" if meta.le is not None else high
    if high is None and low in ("above 0", "at least 0"):
        text = "a positive number" if low == "above 0" else "a non-negative number"
    else:
        text = " ".join(["a number", " and ".join(part for part in (low, high) if part)]).strip()
    return f"{text} ({meta.description})" if meta.description else text


def _plural(tp: Any) -> str:
    inner, meta = _unwrap(tp)
    if inner is str:
        return "non-empty strings" if meta is not None and meta.min_length else "strings"
    one = describe(tp)
    return one.removeprefix("a ").removeprefix("an ") + "s"


def describe(tp: Any) -> str:
    """What a value of type ``tp`` must be, in words (``a positive integer``)."""
    options = _alternatives(tp)
    if len(options) > 1:
        named = [describe(option) for option in options if option is not type(None)]
        text = " or ".join(named)
        return f"{text} or null" if type(None) in options else text
    inner, meta = _unwrap(tp)
    if get_origin(inner) is Literal:
        values = [f'"{v}"' if isinstance(v, str) else str(v) for v in get_args(inner)]
        return ", ".join(values[:-1]) + " or " + values[-1] if len(values) > 1 else values[0]
    if inner is bool:
        return "a boolean"
    if inner is int:
        return _integer(meta)
    if inner is float:
        return _number(meta)
    if inner is str:
        return "a non-empty string" if meta is not None and meta.min_length else "a string"
    if get_origin(inner) in (list, set, frozenset, tuple):
        return f"a list of {_plural(get_args(inner)[0])}"
    if _struct(inner) is not None:
        return "an object"
    return f"a {getattr(inner, '__name__', inner)}"


def _json_number(value: object, tp: Any) -> object:
    """An integral float where the field takes an integer: the integer (3.0 is 3 in JSON)."""
    if not isinstance(value, float) or not value.is_integer():
        return value
    return int(value) if any(_unwrap(option)[0] is int for option in _alternatives(tp)) else value


def decode_struct(
    raw: object,
    cls: type[S],
    path: str,
    problems: list[ConfigProblem],
    *,
    base: S | None = None,
    also_known: tuple[str, ...] = (),
    refused: Mapping[str, str] = _NO_REFUSALS,
    ordered: bool = True,
) -> S | None:
    """``raw`` as a ``cls``, or ``None`` with every problem appended to ``problems``.

    ``also_known`` are keys of the same object read elsewhere (skipped here); ``refused``
    maps keys that may not be set here to their message.
    """
    if not isinstance(raw, dict):
        problems.append(ConfigProblem(path, "must be an object"))
        return None
    fields = _fields(cls)
    before = len(problems)
    values: dict[str, Any] = {}
    failed: set[str] = set()  # fields with a problem of their own: no order check on them
    for key, value in raw.items():
        where = f"{path}.{key}"
        info = fields.get(key)
        if key in refused:
            problems.append(ConfigProblem(where, refused[key]))
        elif info is None:
            if key not in also_known:
                known = ", ".join((*fields, *also_known))
                member = getattr(cls, "member", "key")
                problems.append(ConfigProblem(where, f"unknown {member} (known: {known})"))
        elif (nested := _struct(info.type)) is not None:
            inner = decode_struct(
                value, nested, where, problems, base=getattr(base, info.name, None), ordered=ordered
            )
            if inner is not None:
                values[info.name] = inner
        else:
            try:
                converted = msgspec.convert(_json_number(value, info.type), info.type, strict=True)
                if isinstance(converted, float) and not math.isfinite(converted):  # JSON5's Infinity
                    raise msgspec.ValidationError("not a finite number")
                values[info.name] = converted
            except msgspec.ValidationError:
                problems.append(ConfigProblem(where, f"must be {describe(info.type)}"))
                failed.add(info.name)
    decoded = msgspec.structs.replace(base, **values) if base is not None else cls(**values)
    names = encode_names(cls)
    # checked also beside other problems (every problem at once), but not where a value of the
    # pair was refused; ``ordered=False`` leaves them to the caller (a per-agent object is
    # checked once merged over the global one)
    for low, high in getattr(cls, "ordered", ()) if ordered else ():
        if low not in failed and high not in failed and getattr(decoded, low) >= getattr(decoded, high):
            problems.append(ConfigProblem(f"{path}.{names[low]}", f"must be lower than {names[high]}"))
    return None if len(problems) > before else decoded
