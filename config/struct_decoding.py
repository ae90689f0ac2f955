"""Decoding a config object into a msgspec Struct, key by key, every problem with its path.

Rules:

* The Struct is the only declaration: file names (``rename`` / ``name``), types, ``Meta``
  constraints and defaults. Nothing here names a section or a key.
* Each key is converted on its own against its field's type (``msgspec.convert``, strict),
  so every problem is reported at its path (msgspec alone stops at the first), with a message
  written from the field's type: ``must be a positive integer of at most 1000``. A type whose
  ``Meta`` has ``extra={"problem": f}`` is told ``f(value)`` instead (a preset's name).
* A field holding Structs is decoded the same way, one level down: a Struct (``null`` too
  where the field takes ``None``; where it takes other types, a value that is no object is
  converted to those), a list of them (``[i]`` in the path) or a dict of them (``.key``).
  A value that is not the object (the array) is ``must be an object`` (``must be an array``).
* A field whose default is ``msgspec.UNSET`` may be left out, and left out is not the same as
  any value (OpenClaw's ``enabled``: unset, ``false`` and ``true`` are three things).
* JSON numbers: an integral float (``3.0``) is the integer ``3``, as in JavaScript.
* An unknown key of a Struct with ``forbid_unknown_fields`` is a problem (``unknown key
  (known: ...)``; a Struct's ``member`` ClassVar names its keys otherwise, its ``unknown_key``
  ClassVar replaces the whole message); a Struct without it leaves other keys alone (they are
  OpenClaw's). ``refused`` keys (the argument, or the Struct's ``refused`` ClassVar) get their
  own message instead.
* A Struct's ``ordered`` ClassVar lists (lower, higher) field pairs: a lower value not below
  the higher one is reported at the lower key (``order_message`` ClassVar: how), beside the
  object's other problems. A pair with a value of its own problem, or a value left unset, is
  not compared; ``ordered=False`` (or a Struct's ``merged_later`` ClassVar, for it and all
  below it) leaves the pairs to the caller, e.g. a per-agent object checked once merged over
  the global one.
* Keys not given keep ``base``'s values (or the Struct's defaults).
* A Struct with an ``assembled`` classmethod stands for the Struct it returns, which is decoded
  in its place (``loopwatch.detectors``: the rules' sections, handed in by the registry).
"""

from __future__ import annotations

import functools
import math
import types
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal, NamedTuple, TypeVar, Union, get_args, get_origin

import msgspec

from loopwatch.config.errors import ConfigProblem

__all__ = ["decode_field", "decode_struct", "describe", "encode_names", "settable"]

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


def _union(options: tuple[Any, ...]) -> Any:
    return options[0] if len(options) == 1 else Union[options]  # noqa: UP007 (a tuple of types)


@functools.cache
def settable(tp: Any) -> Any:
    """``tp`` without ``msgspec.UnsetType`` (the type a value given in a file must have)."""
    options = tuple(option for option in _alternatives(tp) if option is not msgspec.UnsetType)
    return _union(options) if len(options) != len(_alternatives(tp)) else tp


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
    unit = (meta.extra or {}).get("unit")
    return f"{text} ({unit})" if unit else text


def _plural(tp: Any) -> str:
    inner, meta = _unwrap(tp)
    if inner is str:
        return "non-empty strings" if meta is not None and meta.min_length else "strings"
    one = describe(tp)
    return one.removeprefix("a ").removeprefix("an ") + "s"


def describe(tp: Any) -> str:
    """What a value of type ``tp`` must be, in words (``a positive integer``)."""
    options = _alternatives(settable(tp))
    if len(options) > 1:
        named = [describe(option) for option in options if option is not type(None)]
        text = " or ".join(named)
        return f"{text} or null" if type(None) in options else text
    inner, meta = _unwrap(options[0])
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


def _problem(tp: Any, value: object) -> str:
    """What is wrong with ``value`` for a field of type ``tp``: the type's own words where its
    ``Meta`` has a ``problem`` function, else ``must be`` what :func:`describe` says."""
    for option in _alternatives(tp):
        meta = _unwrap(option)[1]
        told: Callable[[object], str] | None = (meta.extra or {}).get("problem") if meta else None
        if told is not None:
            return told(value)
    return f"must be {describe(tp)}"


def _holds_objects(tp: Any) -> bool:
    """Whether values of ``tp`` are (or may be) Structs, or lists or dicts of Structs."""
    for option in _alternatives(tp):
        inner = _unwrap(option)[0]
        if _struct(inner) is not None:
            return True
        if get_origin(inner) in (list, dict) and _holds_objects(get_args(inner)[-1]):
            return True
    return False


class _Shape(NamedTuple):
    """How a value of one field type is decoded (worked out once per type)."""

    holds_objects: bool
    takes_int: bool  # an integral float given is the integer (3.0 is 3 in JSON)
    struct: type[msgspec.Struct] | None  # the Struct a JSON object is decoded as
    container: Any  # list[...] or dict[str, ...] of Structs, or None
    others: Any  # the type a value that is none of those is converted to, or None


@functools.cache
def _shape(tp: Any) -> _Shape:
    takes_int = any(_unwrap(option)[0] is int for option in _alternatives(tp))
    if not _holds_objects(tp):
        return _Shape(False, takes_int, None, None, None)
    held = [_unwrap(option)[0] for option in _alternatives(tp)]
    structs = [inner for inner in held if _struct(inner) is not None]
    containers = [inner for inner in held if get_origin(inner) in (list, dict)]
    others = tuple(inner for inner in held if inner not in (*structs, *containers))
    return _Shape(
        True,
        takes_int,
        structs[0] if structs else None,
        containers[0] if containers else None,
        _union(others) if others else None,
    )


class _Failed(Exception):
    """A value with a problem of its own (already appended)."""


def _decode_value(
    value: object,
    tp: Any,
    where: str,
    problems: list[ConfigProblem],
    base: Any,
    ordered: bool,
    shape: _Shape | None = None,
) -> Any:
    """``value`` as a ``tp`` (of shape ``shape``, if known); raises :class:`_Failed` with its
    problems appended."""
    shape = shape or _shape(tp)
    if not shape.holds_objects:
        if shape.takes_int and isinstance(value, float) and value.is_integer():
            value = int(value)  # JSON numbers: 3.0 is 3
        try:
            converted = msgspec.convert(value, tp, strict=True)
            if isinstance(converted, float) and not math.isfinite(converted):  # JSON5's Infinity
                raise msgspec.ValidationError("not a finite number")
        except msgspec.ValidationError:
            problems.append(ConfigProblem(where, _problem(tp, value)))
            raise _Failed from None
        return converted
    if shape.struct is not None and isinstance(value, dict):
        before = len(problems)
        decoded = decode_struct(value, shape.struct, where, problems, base=base, ordered=ordered)
        if decoded is None or len(problems) > before:
            raise _Failed
        return decoded
    container = shape.container
    if container is not None and isinstance(value, list | dict):
        item = get_args(container)[-1]
        if get_origin(container) is list and isinstance(value, list):
            return _decode_items(list(enumerate(value)), item, where, "[{}]", problems, ordered)
        if get_origin(container) is dict and isinstance(value, dict):
            items = _decode_items(list(value.items()), item, where, ".{}", problems, ordered)
            return dict(zip(value, items, strict=True))
    if shape.others is not None:  # e.g. None, or what an agent entry that is no object may be
        try:
            return msgspec.convert(value, shape.others, strict=True)
        except msgspec.ValidationError:
            pass
    kind = "an array" if container is not None and get_origin(container) is list else "an object"
    problems.append(ConfigProblem(where, f"must be {kind}"))
    raise _Failed


def _decode_items(
    items: list[tuple[Any, Any]],
    tp: Any,
    where: str,
    step: str,
    problems: list[ConfigProblem],
    ordered: bool,
) -> list[Any]:
    """Every item of a list or dict decoded (each one's problems listed), or :class:`_Failed`."""
    decoded: list[Any] = []
    failed = False
    for key, item in items:
        try:
            decoded.append(_decode_value(item, tp, where + step.format(key), problems, None, ordered))
        except _Failed:
            failed = True
    if failed:
        raise _Failed
    return decoded


class _Declared(NamedTuple):
    """What decoding an object of one Struct reads of its declaration (worked out once)."""

    #: file name -> (attribute, type a given value must have, its shape)
    fields: dict[str, tuple[str, Any, _Shape]]
    refused: Mapping[str, str]
    closed: bool  # unknown keys are problems (``forbid_unknown_fields``)
    merged_later: bool
    ordered: tuple[tuple[str, str], ...]
    order_message: str
    names: dict[str, str]  # attribute -> file name
    unknown_key: str | None
    member: str


@functools.cache
def _declared(cls: type[msgspec.Struct]) -> _Declared:
    return _Declared(
        {
            key: (info.name, settable(info.type), _shape(settable(info.type)))
            for key, info in _fields(cls).items()
        },
        getattr(cls, "refused", _NO_REFUSALS),
        cls.__struct_config__.forbid_unknown_fields,
        getattr(cls, "merged_later", False),
        getattr(cls, "ordered", ()),
        getattr(cls, "order_message", "must be lower than {high}"),
        encode_names(cls),
        getattr(cls, "unknown_key", None),
        getattr(cls, "member", "key"),
    )


def decode_field(
    cls: type[msgspec.Struct],
    key: str,
    value: object,
    path: str,
    problems: list[ConfigProblem],
    *,
    ordered: bool = True,
) -> tuple[bool, Any]:
    """One key of a ``cls`` object (its file name), decoded as :func:`decode_struct` decodes
    it: ``(True, value)``, or ``(False, None)`` with its problems appended."""
    declared = _declared(cls)
    _, tp, shape = declared.fields[key]
    try:
        ordered = ordered and not declared.merged_later
        return True, _decode_value(value, tp, path, problems, None, ordered, shape)
    except _Failed:
        return False, None


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
    assembled: Callable[[], type[S]] | None = getattr(cls, "assembled", None)
    if assembled is not None:
        cls = assembled()
    declared = _declared(cls)
    fields = declared.fields
    if declared.refused:
        refused = {**declared.refused, **refused}
    ordered = ordered and not declared.merged_later
    before = len(problems)
    values: dict[str, Any] = {}
    failed: set[str] = set()  # fields with a problem of their own: no order check on them
    for key, value in raw.items():
        where = f"{path}.{key}" if path else key
        field = fields.get(key)
        if key in refused:
            problems.append(ConfigProblem(where, refused[key]))
        elif field is None:
            if declared.closed and key not in also_known:
                known = ", ".join((*fields, *also_known))
                told = declared.unknown_key or f"unknown {declared.member} (known: {known})"
                problems.append(ConfigProblem(where, told))
        else:
            name, tp, shape = field
            try:
                within = getattr(base, name) if base is not None else None
                values[name] = _decode_value(value, tp, where, problems, within, ordered, shape)
            except _Failed:
                failed.add(name)
    decoded = msgspec.structs.replace(base, **values) if base is not None else cls(**values)
    # checked also beside other problems (every problem at once), but not where a value of the
    # pair was refused or left unset; ``ordered=False`` leaves them to the caller (a per-agent
    # object is checked once merged over the global one)
    names = declared.names
    for low, high in declared.ordered if ordered else ():
        if low in failed or high in failed:
            continue
        lower, higher = getattr(decoded, low), getattr(decoded, high)
        if lower is not msgspec.UNSET and higher is not msgspec.UNSET and lower >= higher:
            where = f"{path}.{names[low]}" if path else names[low]
            problems.append(
                ConfigProblem(where, declared.order_message.format(low=names[low], high=names[high]))
            )
    return None if len(problems) > before else decoded
