"""The config declared once: ``check-config --schema``'s JSON Schema and the decoder agree.

The schema (for editors) and the decoder (``parse_config_value``) are both written from the
Structs of ``config/``. Every example config (examples/, docker/, the configs in docs/, the
conformance vectors' blocks in tests/data) is accepted by both; every bad config of the tests
is rejected by both, and the schema finds each of the decoder's problems at its path (or at
the object holding it); every declared key, tried with values of every kind at every place it
may stand, gets the same verdict from both. What a JSON Schema cannot say is decoder-only,
each kind named below with its reason.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

import json5
import msgspec
import pytest
from jsonschema import Draft202012Validator, ValidationError  # type: ignore[import-untyped]

from loopwatch.config import ConfigError, parse_config_value
from loopwatch.config.document import AgentListEntry, ConfigFile
from loopwatch.config.rule_sections import rule_set
from loopwatch.config.schema import config_schema
from loopwatch.config.struct_decoding import settable

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = config_schema()
VALIDATOR = Draft202012Validator(SCHEMA)

#: problems a JSON Schema cannot express: the decoder alone finds them (by message)
DECODER_ONLY_PROBLEMS = {
    "must be lower than": "a threshold below another one: a JSON Schema cannot compare two values",
    "twice": "one agent's block, preset or detectors in two entries: a JSON Schema cannot compare "
    "entries with each other",
}
#: bad configs the schema accepts, each with the reason (their problems are all decoder-only)
DECODER_ONLY_CASES = {
    "ordered-openclaw-critical-global": DECODER_ONLY_PROBLEMS["must be lower than"],
    "ordered-openclaw-agent-block": DECODER_ONLY_PROBLEMS["must be lower than"],
    "ordered-edit-undo-over-default": DECODER_ONLY_PROBLEMS["must be lower than"],
    "ordered-agent-merged-over-global": DECODER_ONLY_PROBLEMS["must be lower than"],
    "ordered-callcycle-over-preset": DECODER_ONLY_PROBLEMS["must be lower than"],
    "detectors-twice": DECODER_ONLY_PROBLEMS["twice"],
    "loop-budget-infinity": "JSON5's Infinity: no JSON number, so no JSON Schema keyword bounds it",
    "loop-budget-nan": "JSON5's NaN: no JSON number, and NaN compares false with every bound",
    **{
        f"ordered-agent-over-preset-{place}-{index}": DECODER_ONLY_PROBLEMS["must be lower than"]
        for place in ("global", "agent")
        for index in range(5)
    },
}


def decoder_problems(document: object) -> list[tuple[str, str]] | None:
    """The decoder's problems (path, message), or ``None`` when it accepts the document."""
    try:
        parse_config_value(document)
    except ConfigError as refused:
        return [(problem.path, problem.message) for problem in refused.problems]
    return None


def schema_error_paths(document: object) -> set[tuple[object, ...]]:
    """Where the schema finds problems: every error's path, those inside ``anyOf`` included."""
    paths: set[tuple[object, ...]] = set()

    def add(error: ValidationError) -> None:
        paths.add(tuple(error.absolute_path))
        for inner in error.context or ():
            add(inner)

    for error in VALIDATOR.iter_errors(document):
        add(error)
    return paths


def as_path(dotted: str) -> tuple[object, ...]:
    """``agents.list[0].id`` as ``("agents", "list", 0, "id")``."""
    steps: list[object] = []
    for part in dotted.split(".") if dotted else ():
        steps.append(part.split("[", 1)[0])
        steps.extend(int(index) for index in re.findall(r"\[(\d+)\]", part))
    return tuple(steps)


def decoder_only(message: str) -> bool:
    return any(kind in message for kind in DECODER_ONLY_PROBLEMS)


# -- the schema itself -------------------------------------------------------------------------


def test_the_schema_is_a_valid_draft_2020_12_schema() -> None:
    Draft202012Validator.check_schema(SCHEMA)
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    defs = SCHEMA["$defs"]
    # descriptions from the Structs' docstrings and Meta
    assert "OpenClaw's loop detection" in defs["LoopDetection"]["description"]
    assert "warningThreshold < criticalThreshold" in defs["LoopDetection"]["description"]
    assert defs["LoopDetection"]["properties"]["historySize"]["default"] == 30
    assert "shadow rollout" in defs["LoopwatchSection"]["properties"]["observeOnly"]["description"].lower()
    assert defs["LoopwatchSection"]["properties"]["preset"]["enum"] == [
        "agents",
        "agents-2026-12",
        "openclaw",
    ]
    # the fleet-wide rules refused per agent, with the decoder's words
    outage = defs["AgentDetectors"]["properties"]["toolOutage"]
    assert outage == {"not": {}, "description": "a fleet-wide rule: set it in the global loopwatch.detectors"}


def test_check_config_schema_prints_it() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "loopwatch", "check-config", "--schema"], capture_output=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == SCHEMA
    without = subprocess.run(
        [sys.executable, "-m", "loopwatch", "check-config"], capture_output=True, timeout=120
    )
    assert without.returncode == 2
    assert b"FILE (or --schema)" in without.stderr


# -- every example config: accepted by both ------------------------------------------------------


def doc_configs() -> Iterator[tuple[str, str]]:
    """Every JSON / JSON5 block of docs/ and the README that sets a key loopwatch reads."""
    block = re.compile(r"```json5?\n(.*?)```", re.DOTALL)
    reads = re.compile(r"""["']?\b(loopDetection|loopwatch)\b["']?\s*:""")
    for page in sorted([*ROOT.glob("docs/*.md"), ROOT / "README.md"]):
        for index, found in enumerate(block.finditer(page.read_text())):
            text = found.group(1).strip()
            if reads.search(text):
                yield f"{page.name}#{index}", text if text.startswith("{") else "{" + text + "}"


DOC_CONFIGS = dict(doc_configs())
EXAMPLE_FILES = sorted([*ROOT.glob("examples/*.json"), ROOT / "docker" / "openclaw.example.json"])


def test_the_docs_hold_the_configs_this_test_reads() -> None:
    pages = {name.split("#")[0] for name in DOC_CONFIGS}
    assert {"configuration.md", "own-rules.md", "fleet-rules.md", "real-loops.md"} <= pages, DOC_CONFIGS
    assert len(EXAMPLE_FILES) >= 3


@pytest.mark.parametrize(
    "text",
    [
        *(pytest.param(path.read_text(), id=str(path.relative_to(ROOT))) for path in EXAMPLE_FILES),
        *(pytest.param(text, id=name) for name, text in DOC_CONFIGS.items()),
    ],
)
def test_every_example_config_is_accepted_by_the_decoder_and_the_schema(text: str) -> None:
    document = json5.loads(text)
    assert decoder_problems(document) is None
    assert list(VALIDATOR.iter_errors(document)) == []


def vector_configs() -> Iterator[Any]:
    """The conformance vectors' blocks (tests/data), each as a config file sets it."""
    for name in ("openclaw-public.jsonl", "openclaw-newest.jsonl", "loopwatch-batch.jsonl"):
        for line in (ROOT / "tests" / "data" / name).read_text().splitlines():
            vector = json.loads(line)
            document: dict[str, Any] = {}
            if "config" in vector:
                document["tools"] = {"loopDetection": vector["config"]}
            if "agentConfig" in vector:
                entry = {"id": "agent", "tools": {"loopDetection": vector["agentConfig"]}}
                document["agents"] = {"list": [entry]}
            yield pytest.param(document, id=vector["name"])


@pytest.mark.parametrize("document", list(vector_configs()))
def test_every_conformance_vector_s_block_is_judged_alike(document: dict[str, Any]) -> None:
    """Accepted by both, but for a vector of the threshold auto-raise, whose block is out of
    order on purpose (OpenClaw resolves it; its strict schema, and the decoder, refuse it)."""
    problems = decoder_problems(document)
    if problems is not None:
        assert all(decoder_only(message) for _, message in problems), problems
    assert list(VALIDATOR.iter_errors(document)) == []


# -- every bad config of the tests: rejected by both ---------------------------------------------


def agent(entry: dict[str, Any]) -> dict[str, Any]:
    return {"agents": {"list": [{"id": "coder", **entry}]}}


def rules(detectors: object, **section: object) -> dict[str, Any]:
    return {"tools": {"loopDetection": {"enabled": True}}, "loopwatch": {"detectors": detectors, **section}}


PRESET_ORDER_CASES = [
    {"sameCallStreak": {"warningThreshold": 5}},
    {"sameCallStreak": {"criticalThreshold": 3}},
    {"callCycle": {"criticalThreshold": 2}},
    {"sameFailure": {"warningThreshold": 6}},
    {"sameFailure": {"sweepCriticalThreshold": 5}},
]

#: the bad configs of the config tests (the test each comes from is named beside it)
BAD: list[Any] = [
    # test_config.py
    pytest.param(
        {
            "tools": {
                "loopDetection": {
                    "enabled": "yes",
                    "historySize": 0,
                    "bogus": 1,
                    "detectors": {"pingPong": 1, "x": True},
                    "warningThreshold": 20,
                    "criticalThreshold": 10,
                }
            }
        },
        id="block-every-problem",
    ),
    pytest.param(
        {"tools": {"loopDetection": {"criticalThreshold": 30, "globalCircuitBreakerThreshold": 30}}},
        id="ordered-openclaw-critical-global",
    ),
    pytest.param(
        agent({"tools": {"loopDetection": {"warningThreshold": 9, "criticalThreshold": 9}}}),
        id="ordered-openclaw-agent-block",
    ),
    pytest.param(
        json5.loads(
            """{tools: {loopDetection: {enabled: 1}},
      agents: {list: [{id: "a", tools: {loopDetection: {historySize: -1}}},
                      {id: "b", tools: {loopDetection: {nope: true}}}]},
      loopwatch: {digest: "md5", seenEventIds: 3}}"""
        ),
        id="bad-file-all-at-once",
    ),
    pytest.param(agent({"tools": {"loopDetection": {"warningThreshold": 0}}}), id="agent-block-zero"),
    pytest.param([1, 2, 3], id="not-an-object"),  # also test_cli_corpus.py's "array"
    # test_config_sections.py
    pytest.param(
        {
            "loopwatch": {
                "digest": "md5",
                "criticalBlocksBeforeAbort": -1,
                "recoveryAbort": "no",
                "observeOnly": 1,
                "providerSendTools": ["send", ""],
                "seenEventIds": 255,
                "maxEventBytes": 0,
                "openclawRevision": "2027-01",
                "churnStaleAfterS": 1.5,
                "colour": "red",
                "detectors": {
                    "runNoProgress": {"enabled": "yes", "windowSize": 1001},
                    "editUndo": {"criticalThreshold": True},
                    "loopBudget": {"usd": 0},
                    "toolOutage": {"bucketSeconds": 0, "block": "sometimes"},
                    "systemicLoop": {"minShare": 1.5, "windowBuckets": 49},
                    "vibes": {},
                },
            }
        },
        id="loopwatch-every-problem",
    ),
    pytest.param(
        {"loopwatch": {"detectors": {"editUndo": {"warningThreshold": 5}, "loopBudget": {"usd": "x"}}}},
        id="ordered-beside-a-type-problem",
    ),
    *(
        pytest.param({"loopwatch": {"detectors": {"runNoProgress": bad}}}, id=f"rule-not-an-object-{i}")
        for i, bad in enumerate(([], "x", 3))
    ),
    pytest.param({"loopwatch": []}, id="section-not-an-object"),
    pytest.param({"loopwatch": {"seenEventIds": 300.5}}, id="seen-event-ids-fraction"),
    pytest.param({"loopwatch": {"maxEventBytes": True}}, id="max-event-bytes-boolean"),
    pytest.param({"loopwatch": {"digest": "md5"}}, id="digest-md5"),
    pytest.param({"loopwatch": {"detectors": {"editUndo": {"enabled": "on"}}}}, id="edit-undo-enabled-on"),
    # test_own_rules.py
    pytest.param(
        json5.loads(
            """{
              loopwatch: {detectors: {
                runNoProgress: {enabled: "yes", windowSize: 5000},
                editUndo: {warningThreshold: 0, sharpness: 1},
                loopBudget: {usd: -1},
                toolOutage: {minShare: 2},
                vibes: {},
              }},
              agents: {list: [{id: "a", loopwatch: {digest: "sha256", detectors: {systemicLoop: {}}}}]},
            }"""
        ),
        id="own-rules-every-problem",
    ),
    pytest.param(rules({"editUndo": {"warningThreshold": 5}}), id="ordered-edit-undo-over-default"),
    pytest.param(
        json5.loads(
            "{loopwatch: {detectors: {runNoProgress: {warningThreshold: 25}}},"
            " agents: {list: [{id: 'a', loopwatch: {detectors: {runNoProgress: {windowSize: 24}}}}]}}"
        ),
        id="ordered-agent-merged-over-global",
    ),
    pytest.param(
        json5.loads(
            "{loopwatch: {digest: 'md5', detectors: {editUndo: {warningThreshold: 4, criticalThreshold: 6},"
            " runNoProgress: {enabled: 'yes', warningThreshold: 40, windowSize: 30}}},"
            " agents: {list: [{id: 'coder', loopwatch: {detectors: {editUndo: {criticalThreshold: 4}}}}]}}"
        ),
        id="merged-order-beside-global-problems",
    ),
    pytest.param(
        json5.loads(
            "{loopwatch: {digest: 'md5', detectors: {editUndo: {warningThreshold: 4, criticalThreshold: 6}}},"
            " agents: {list: [{id: 'coder', loopwatch: {detectors: {editUndo: {criticalThreshold: 4}}}}]}}"
        ),
        id="merged-order-beside-a-digest",
    ),
    pytest.param(
        json5.loads(
            "{agents: {list: [{id: 'coder', loopwatch: {detectors: {loopBudget: {usd: 10}}}},"
            " {id: 'coder', loopwatch: {detectors: {loopBudget: {usd: 1000}}}}],"
            " entries: {coder: {loopwatch: {detectors: {loopBudget: {usd: 5}}}}}}}"
        ),
        id="detectors-twice",
    ),
    pytest.param(
        json5.loads("{loopwatch: {detectors: {loopBudget: {usd: Infinity}}}}"), id="loop-budget-infinity"
    ),
    pytest.param(
        json5.loads("{loopwatch: {detectors: {loopBudget: {usd: -Infinity}}}}"),
        id="loop-budget-minus-infinity",
    ),
    pytest.param(json5.loads("{loopwatch: {detectors: {loopBudget: {usd: NaN}}}}"), id="loop-budget-nan"),
    # test_agents_preset.py
    pytest.param(
        {
            "tools": {"loopDetection": {"warningThreshold": "ten"}},
            "loopwatch": {"preset": "agent", "digest": "md5"},
            "agents": {
                "list": [
                    {"id": "a", "loopwatch": {"preset": 7}},
                    {"id": "b", "loopwatch": {"preset": "agents-2027-01", "colour": "red"}},
                    {"id": "c", "loopwatch": {"preset": None}},
                    {"id": "d", "loopwatch": {"preset": ["agents"]}},
                    {"id": "e", "loopwatch": {"preset": "agents"}},
                ],
                "entries": {
                    "f": {"loopwatch": {"preset": "AGENTS"}},
                    "e": {"loopwatch": {"preset": "openclaw"}},
                },
            },
        },
        id="presets-every-problem",
    ),
    *(
        pytest.param({"loopwatch": {"preset": value}}, id=f"preset-not-a-name-{i}")
        for i, value in enumerate([7, True, None, {"name": "agents"}, ["agents"], ""])
    ),
    *(
        pytest.param(
            {"loopwatch": {"preset": "agents"}, **agent({"loopwatch": {"detectors": detectors}})},
            id=f"ordered-agent-over-preset-global-{i}",
        )
        for i, detectors in enumerate(PRESET_ORDER_CASES)
    ),
    *(
        pytest.param(
            agent({"loopwatch": {"preset": "agents", "detectors": detectors}}),
            id=f"ordered-agent-over-preset-agent-{i}",
        )
        for i, detectors in enumerate(PRESET_ORDER_CASES)
    ),
    pytest.param(
        {"loopwatch": {"preset": "agents", "detectors": {"callCycle": {"warningThreshold": 3}}}},
        id="ordered-callcycle-over-preset",
    ),
    # test_fleet_rules.py
    pytest.param(
        json5.loads(
            '{agents: {list: [{id: "x", loopwatch: {detectors: {toolOutage: {minRuns: 2}}}}]},'
            " loopwatch: {detectors: {systemicLoop: {minShare: 2}}}}"
        ),
        id="fleet-rule-per-agent",
    ),
    # test_delegation_depth.py
    pytest.param(
        rules(
            {
                "delegation": {
                    "maxDepth": -1,
                    "chainWarningThreshold": 30,
                    "chainCriticalThreshold": 20,
                    "bogus": 1,
                }
            }
        ),
        id="delegation-every-problem",
    ),
    pytest.param(
        {
            "tools": {"loopDetection": {"enabled": True}},
            **agent({"loopwatch": {"detectors": {"delegation": {"enabled": True}}}}),
        },
        id="delegation-per-agent",
    ),
    # test_chain_bounds.py
    *(
        pytest.param(
            {"loopwatch": {"detectors": {"delegation": {"enabled": True, key: value}}}},
            id=f"delegation-{key}",
        )
        for key, value in (("maxRuns", 1025), ("minRuns", 33))
    ),
    # test_cli.py
    pytest.param(json5.loads("{tools: {loopDetection: {historySize: 0}}}"), id="cli-history-size-zero"),
    pytest.param(
        json5.loads('{tools: {loopDetection: {enabled: "yes", historySize: -1}}}'), id="cli-json-report"
    ),
    # an agent entry with a block or a loopwatch object needs an id (config.fleet)
    pytest.param({"agents": {"list": [{"tools": {"loopDetection": {}}}]}}, id="agent-without-id"),
    pytest.param({"agents": {"list": [{"id": "  ", "loopwatch": {}}]}}, id="agent-with-a-blank-id"),
    pytest.param({"agents": {"list": [3]}}, id="agent-entry-not-an-object"),
    pytest.param({"agents": {"list": {}}}, id="agents-list-not-an-array"),
]


@pytest.mark.parametrize("document", BAD)
def test_every_bad_config_is_rejected_by_the_decoder_and_the_schema(
    document: object, request: pytest.FixtureRequest
) -> None:
    case = request.node.callspec.id
    problems = decoder_problems(document)
    assert problems, "the decoder accepts it"
    found = schema_error_paths(document)
    if case in DECODER_ONLY_CASES:
        assert found == set(), f"the schema rejects it too: take {case} off DECODER_ONLY_CASES"
        return
    assert found, "the schema accepts it"
    for path, message in problems:
        if decoder_only(message):
            continue
        at = as_path(path)
        assert at in found or at[:-1] in found, (path, message, sorted(map(str, found)))


def test_a_problem_is_decoder_only_where_it_says_so() -> None:
    """Each decoder-only case's problems are all of a decoder-only kind, or its reason says
    which value no JSON Schema can bound."""
    cases = {param.id: param.values[0] for param in BAD}
    assert set(DECODER_ONLY_CASES) <= set(cases)
    for case, reason in DECODER_ONLY_CASES.items():
        problems = decoder_problems(cases[case])
        assert problems
        if "JSON5's" not in reason:
            assert all(decoder_only(message) for _, message in problems), (case, problems)


# -- every declared key, every kind of value, every place: one verdict ---------------------------

VALUES: list[object] = [
    None, True, False, 0, 1, -1, 2, 2.0, 2.5, 3, 8, 16, 17, 1000, 1001, 10**20, 1.5e300,
    "", "x", "agents", "sha256", "2026-05", [], ["x"], ["x", "x"], [""], [1], {}, {"x": 1},
]  # fmt: skip


def bounds(tp: Any) -> list[object]:
    """Values at and beside every bound ``Meta`` declares in ``tp``, and its literals."""
    if get_origin(tp) is Annotated:
        inner, *metas = get_args(tp)
        found = bounds(inner)
        for meta in metas:
            for bound in (meta.gt, meta.ge, meta.lt, meta.le):
                if bound is not None:
                    found += [bound - 1, bound, bound + 1, bound - 0.5, bound + 0.5]
        return found
    if get_origin(tp) is Literal:
        return list(get_args(tp))
    return [value for arg in get_args(tp) for value in bounds(arg)]


#: what an object needs beside the key tried (an agent list entry with a block: its id)
NEEDS: dict[type[msgspec.Struct], dict[str, object]] = {AgentListEntry: {"id": "agent"}}


def declared(cls: type[msgspec.Struct]) -> type[msgspec.Struct]:
    """A Struct as the decoder reads it (``loopwatch.detectors``: as the rules handed in make it)."""
    assembled = getattr(cls, "assembled", None)
    return cls if assembled is None else assembled()


def places(
    cls: type[msgspec.Struct], wrap: Callable[[object], object], seen: tuple[type, ...] = ()
) -> Iterator[tuple[type[msgspec.Struct], Callable[[object], object]]]:
    """Every place an object of each Struct may stand in a file, as a function that puts it there."""
    yield cls, wrap
    needs = NEEDS.get(cls, {})
    for info in msgspec.structs.fields(declared(cls)):
        for option in get_args(settable(info.type)) or (settable(info.type),):
            holder, inner = None, option
            if get_origin(option) is list:
                holder, inner = "list", get_args(option)[0]
            elif get_origin(option) is dict:
                holder, inner = "dict", get_args(option)[1]
            for struct in get_args(inner) or (inner,):
                if not (isinstance(struct, type) and issubclass(struct, msgspec.Struct)) or struct in seen:
                    continue

                def put(
                    value: object,
                    key: str = info.encode_name,
                    held: str | None = holder,
                    beside: dict[str, object] = needs,
                ) -> object:
                    held_value = [value] if held == "list" else {"agent": value} if held == "dict" else value
                    return wrap({**beside, key: held_value})

                yield from places(struct, put, (*seen, cls))


def tries() -> Iterator[tuple[str, object]]:
    """A document per place, key and value: the key set to the value, alone in its object."""
    for cls, put in places(ConfigFile, lambda value: value):
        where = json.dumps(put("HERE"))
        yield f"{where} unknown key", put({**NEEDS.get(cls, {}), "notAKeyOfLoopwatch": 1})
        for info in msgspec.structs.fields(declared(cls)):
            for value in [*VALUES, *bounds(info.type)]:
                yield (
                    f"{where} {info.encode_name}={value!r}",
                    put({**NEEDS.get(cls, {}), info.encode_name: value}),
                )


def test_every_declared_key_gets_one_verdict_from_the_decoder_and_the_schema() -> None:
    differ = []
    tried = 0
    for name, document in tries():
        tried += 1
        problems = decoder_problems(document)
        schema_ok = VALIDATOR.is_valid(document)
        if problems is None and not schema_ok:
            differ.append(f"{name}: only the schema rejects it")
        elif problems is not None and schema_ok and not all(decoder_only(m) for _, m in problems):
            differ.append(f"{name}: only the decoder rejects it: {problems}")
    assert differ == [], "\n".join(differ[:20])
    assert tried > 2000  # every Struct at every place (the walk found them)
    # the rules' sections too (each made from its rule's declaration): in loopwatch.detectors,
    # agents.list[].loopwatch.detectors and agents.entries.<id>.loopwatch.detectors
    walked = [declared(cls).__name__ for cls, _ in places(ConfigFile, lambda value: value)]
    for section in rule_set().sections:
        assert walked.count(section.struct.__name__) == 3, section.key


def test_a_number_json_cannot_hold_is_the_decoder_s_alone() -> None:
    """JSON5's Infinity and NaN: the decoder refuses them wherever a number goes; JSON has no
    such number, so the schema is not asked (see DECODER_ONLY_CASES)."""
    for value in (math.inf, -math.inf, math.nan):
        assert decoder_problems({"loopwatch": {"detectors": {"systemicLoop": {"minShare": value}}}})
        assert decoder_problems({"tools": {"loopDetection": {"historySize": value}}})
