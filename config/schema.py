"""The JSON Schema of a config file (``loopwatch check-config --schema``), for editors.

Written from the declarations the decoder reads (:class:`config.document.ConfigFile` and the
Structs below it; ``loopwatch.detectors`` as the rules handed in make it,
:mod:`config.rule_sections`) by ``msgspec.json.schema_components``, JSON Schema draft 2020-12:
keys, types, ``Meta`` constraints, defaults, and the Structs' docstrings and ``Meta``
descriptions as descriptions. A Struct's ClassVars add what msgspec does not write:

* ``refused``: keys the object may not set (an agent's fleet-wide rules), each refused with
  its message as the description;
* ``json_schema``: the schema of a rule the decoder checks in code (an agent entry's id);
* ``ordered``: pairs a JSON Schema cannot compare (a warning threshold below the critical
  one) are named in the object's description; the decoder checks them.

:func:`stream_settings_schema` is the schema of the stream settings (``check-config --schema
--stream``), written the same way from :class:`config.stream_settings.StreamSettings`; its
``checked_between`` ClassVar names the checks between settings in its description.

A list of unique strings (a ``frozenset``) is written without ``uniqueItems``: the decoder takes
a name given twice. Everything else the decoder refuses and a schema cannot say (the ordered
pairs, one agent given twice, a number that is no JSON number) is listed, with its reason, in
``tests/unit/test_config_schema.py``.
"""

from __future__ import annotations

from typing import Any, get_args

import msgspec

from loopwatch.config.document import ConfigFile
from loopwatch.config.stream_settings import StreamSettings
from loopwatch.config.struct_decoding import encode_names

__all__ = ["DRAFT", "config_schema", "stream_settings_schema"]

DRAFT = "https://json-schema.org/draft/2020-12/schema"


def _structs(tp: Any, found: dict[str, type[msgspec.Struct]]) -> dict[str, type[msgspec.Struct]]:
    """Every Struct ``tp`` holds, by the name msgspec gives its schema (a Struct that stands for
    an assembled one, the ``detectors`` object, as the Struct it stands for)."""
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        assembled = getattr(tp, "assembled", None)
        tp = assembled() if assembled is not None else tp
        if found.setdefault(tp.__name__, tp) is not tp:
            raise ValueError(f"two config Structs are named {tp.__name__}")
        for info in msgspec.structs.fields(tp):
            _structs(info.type, found)
    for arg in get_args(tp):
        _structs(arg, found)
    return found


def _plain(text: str) -> str:
    """A docstring as an editor shows it: paragraphs of one line each, ``code`` as `code`."""
    paragraphs = (" ".join(line.strip() for line in part.splitlines()) for part in text.split("\n\n"))
    return "\n\n".join(paragraphs).replace("``", "`")


def _for_editors(schema: object) -> None:
    """Every description made plain; no ``uniqueItems`` (the decoder takes a name twice)."""
    if isinstance(schema, dict):
        schema.pop("uniqueItems", None)
        if isinstance(schema.get("description"), str):
            schema["description"] = _plain(schema["description"])
        for value in schema.values():
            _for_editors(value)
    elif isinstance(schema, list):
        for value in schema:
            _for_editors(value)


def _completed(cls: type[msgspec.Struct], schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` of ``cls`` with what its ClassVars declare beside its fields."""
    for key, message in getattr(cls, "refused", {}).items():
        schema["properties"][key] = {"not": {}, "description": message}
    names = encode_names(cls)
    pairs = [f"{names[low]} < {names[high]}" for low, high in getattr(cls, "ordered", ())]
    if pairs:
        checked = f"Checked by loopwatch check-config, not by this schema: {'; '.join(pairs)}."
        schema["description"] = (
            f"{schema['description']}\n\n{checked}" if "description" in schema else checked
        )
    schema.update(getattr(cls, "json_schema", {}))
    return schema


def config_schema() -> dict[str, Any]:
    """The JSON Schema of a config file (JSON; JSON5 files are the same values)."""
    (root,), components = msgspec.json.schema_components([ConfigFile], ref_template="#/$defs/{name}")
    structs = _structs(ConfigFile, {})
    # the detectors objects as the handed-in rules make them, in place of the Structs the file's
    # Structs name for them (of the same names)
    assembled = [cls for cls in structs.values() if getattr(cls, "assembled", None) is not None]
    components.update(msgspec.json.schema_components(assembled, ref_template="#/$defs/{name}")[1])
    for name, schema in components.items():
        _completed(structs[name], schema)
    _for_editors(components)
    document = components.pop(ConfigFile.__name__)
    if root != {"$ref": f"#/$defs/{ConfigFile.__name__}"}:
        raise ValueError(f"unexpected root schema {root}")
    return {
        "$schema": DRAFT,
        **document,
        "title": "loopwatch config file",
        "$defs": dict(sorted(components.items())),
    }


def stream_settings_schema() -> dict[str, Any]:
    """The JSON Schema of the stream settings: an object of settings by name, each the value of
    its ``LOOPWATCH_<NAME>`` (as ``check-config --json`` prints them under ``stream``)."""
    (root,), components = msgspec.json.schema_components([StreamSettings], ref_template="#/$defs/{name}")
    if root != {"$ref": f"#/$defs/{StreamSettings.__name__}"} or len(components) != 1:
        raise ValueError(f"unexpected root schema {root}")
    document = components[StreamSettings.__name__]
    for field in document["properties"].values():  # a setting that may be unset: described once
        described = [option for option in field.get("anyOf", ()) if "description" in option]
        if described and "description" not in field:
            field["description"] = described[0].pop("description")
    checked = "; ".join(StreamSettings.checked_between)
    document["description"] += f"\n\nChecked by loopwatch, not by this schema: {checked}."
    _for_editors(document)
    return {"$schema": DRAFT, **document, "title": "loopwatch stream settings (LOOPWATCH_<NAME>)"}
