"""A rule is three files (CONTRIBUTING.md, "Adding a rule"): its module under
``detectors/rules/``, its line in the registry and its docs section. Everything else comes from
the registry: the config section it is read from, ``check-config``'s words, the JSON Schema,
the runtime texts and the compiled-module list.

The rule is ``tests/recipe_rule.py`` (``tool_streak``: a streak of calls of one tool, with a
state per run, a config section, its messages and its runtime words). One test adds it to a
copy of the package as a contributor would (the module, and its line in the registry: the
copy differs from the checkout in nothing else) and runs that copy: a config file enabling it
with thresholds (``check-config``), the schema (``check-config --schema``), its verdicts,
its state through a worker's snapshot and restore (``RunState.to_bytes`` / ``from_bytes``),
and the compiled-module list setup.py builds from. The others register it in this process
(``registered``), as a rule of one's own is, and unregister it; and show that a command
hook's process, which loads no rule, tells an own rule's verdict in the words the gateway
wrote with the rule's own."""

from __future__ import annotations

import filecmp
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator  # type: ignore[import-untyped]

from loopwatch.config import ConfigError, parse_config_value
from loopwatch.config.rule_sections import rule_set
from loopwatch.config.schema import config_schema
from loopwatch.detectors.core_build import compiled_modules, rule_modules
from loopwatch.detectors.engine import Engine
from loopwatch.detectors.events import Output, Verdict
from loopwatch.detectors.rules.registry import REGISTRY, registered
from loopwatch.detectors.runtime_texts import abort_text, block_text, warning_text
from loopwatch.detectors.state import RunState
from tests import recipe_rule
from tests.helpers import Trace, text_result

ROOT = Path(__file__).resolve().parents[2]
RULE_SOURCE = ROOT / "tests" / "recipe_rule.py"
#: the registry's lines a contributor adds (the import, and the rule's place in the order)
IMPORT_AFTER, IMPORT_LINE = "    same_failure,\n", "    tool_streak,\n"
PLACE_AFTER, PLACE_LINE = "    same_failure.RULE,\n", "    tool_streak.RULE,\n"

#: a config file enabling the rule with thresholds of its own
ENABLED_RULE = {"enabled": True, "warningThreshold": 3, "criticalThreshold": 5}
ENABLED = {
    "tools": {"loopDetection": {"enabled": True}},
    "loopwatch": {"detectors": {"toolStreak": ENABLED_RULE}},
}
#: and one setting it wrong three ways
REFUSED = {
    "loopwatch": {"detectors": {"toolStreak": {"warningThreshold": 0, "criticalThreshold": 2, "x": 1}}}
}
REFUSED_PROBLEMS = [
    ["loopwatch.detectors.toolStreak.warningThreshold", "must be a positive integer"],
    ["loopwatch.detectors.toolStreak.x", "unknown key (known: enabled, warningThreshold, criticalThreshold)"],
]
UNORDERED = {"loopwatch": {"detectors": {"toolStreak": {"warningThreshold": 7}}}}  # over criticalThreshold 6
KNOWN_RULES = (
    "runNoProgress, editUndo, loopBudget, sameCallStreak, callCycle, sameFailure, toolStreak, "
    "toolOutage, systemicLoop, delegation"
)


def streak_trace() -> Trace:
    """Five reads of different files (one streak of ``read``), then a list (a new streak)."""
    trace = Trace()
    for index in range(5):
        trace.both("read", {"path": f"/file-{index}"}, text_result(f"content {index}"))
    trace.both("list", {"path": "/"}, text_result("file-0 ... file-4"))
    return trace


#: what the rule's docstring says of the trace under ENABLED (3/5): a warning at the third read,
#: the fifth blocked; the list starts afresh
EXPECTED_VERDICTS = [
    ("tool_streak", 3, "warn", "WARNING: read has been called 3 times in a row."),
    ("tool_streak", 5, "block", "CRITICAL: read was called 5 times in a row. Use another tool or stop."),
]


def verdicts(outputs: list[Output]) -> list[tuple[str, int | None, str, str]]:
    return [(o.detector, o.count, o.action, o.message) for o in outputs if isinstance(o, Verdict)]


# -- the rule added to a copy of the package, as a contributor adds it -------------------------


def package_copy(root: Path) -> Path:
    """A copy of the package where ``detectors/`` has the rule's module and its registry line,
    and nothing else differs (``config/``, ``streams/``, ``integrations/`` are the checkout's)."""
    package = root / "loopwatch"
    package.mkdir()
    shutil.copy(ROOT / "loopwatch" / "__init__.py", package / "__init__.py")
    shutil.copy(ROOT / "loopwatch" / "__main__.py", package / "__main__.py")
    for room in ("config", "streams", "integrations"):
        (package / room).symlink_to(ROOT / room)
    detectors = root / "detectors"
    shutil.copytree(ROOT / "detectors", detectors, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    (package / "detectors").symlink_to(detectors)
    shutil.copy(RULE_SOURCE, detectors / "rules" / "tool_streak.py")
    registry = detectors / "rules" / "registry.py"
    text = registry.read_text()
    assert text.count(IMPORT_AFTER) == text.count(PLACE_AFTER) == 1
    text = text.replace(IMPORT_AFTER, IMPORT_AFTER + IMPORT_LINE).replace(
        PLACE_AFTER, PLACE_AFTER + PLACE_LINE
    )
    registry.write_text(text)
    return root


def differing(left: Path, right: Path) -> set[str]:
    """The files of two trees that differ or are in one only (``.py`` sources)."""
    found: set[str] = set()

    def walk(compared: filecmp.dircmp[str], at: str) -> None:
        names = [*compared.left_only, *compared.right_only, *compared.diff_files]
        found.update(f"{at}{name}" for name in names if name.endswith(".py"))
        for name, sub in compared.subdirs.items():
            if name != "__pycache__":
                walk(sub, f"{at}{name}/")

    walk(filecmp.dircmp(left, right, ignore=["__pycache__"]), "")
    return found


def run_in(copy: Path, code: str, *args: str, status: int = 0) -> str:
    """``code`` run by Python on the copy's package (its sources, not a compiled core); it
    exits with ``status``."""
    prelude = "from tests.pure_python import use_sources\nuse_sources()\n"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(copy), str(ROOT)]),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    done = subprocess.run(
        [sys.executable, "-c", prelude + code, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=copy,
        timeout=120,
    )
    assert done.returncode == status, done.stderr
    return done.stdout


CLI = "import sys\nfrom loopwatch.streams.cli.main import main\nraise SystemExit(main(sys.argv[1:]))\n"

STEPS = """
import json
from loopwatch.config import parse_config_value
from loopwatch.detectors.core_build import compiled_modules
from loopwatch.detectors.engine import Engine
from loopwatch.detectors.events import Verdict
from loopwatch.detectors.runtime_texts import abort_text, block_text, warning_text
from loopwatch.detectors.state import RunState
from tests.unit.test_rule_recipe import ENABLED, streak_trace

config = parse_config_value(ENABLED)
events = streak_trace().events
whole = Engine(config)
uninterrupted = [out for event in events for out in whole.process(event)]
# a worker stores the run's state after each event and a restarted one goes on from it
first, rest = Engine(config), Engine(config)
before = [out for event in events[:7] for out in first.process(event)]
stored = first.states["run-1"].to_bytes()
rest.states["run-1"] = restored = RunState.from_bytes(stored)
state = restored.rule_states["tool_streak"]
restored_as = [type(state).__module__, type(state).__name__, state.dump()]
stored_again = restored.to_bytes() == stored
after = [out for event in events[7:] for out in rest.process(event)]
def said(outputs):
    return [[o.detector, o.count, o.action, o.message] for o in outputs if isinstance(o, Verdict)]
print(json.dumps({
    "uninterrupted": said(uninterrupted),
    "resumed": said(before + after),
    "restored": restored_as,
    "stored_again": stored_again,
    "block_text": block_text("tool_streak", "read", 5),
    "compiled": compiled_modules(),
}))
"""


def test_a_rule_added_as_three_files_is_configured_schema_d_judged_restored_and_compiled(
    tmp_path: Path,
) -> None:
    copy = package_copy(tmp_path)
    # the copy differs from the checkout in the rule's module and its registry line alone
    assert differing(ROOT / "detectors", copy / "detectors") == {"rules/registry.py", "rules/tool_streak.py"}
    added = set((copy / "detectors" / "rules" / "registry.py").read_text().splitlines()) - set(
        (ROOT / "detectors" / "rules" / "registry.py").read_text().splitlines()
    )
    assert added == {IMPORT_LINE.rstrip("\n"), PLACE_LINE.rstrip("\n")}

    # configured: check-config reads the file enabling it, says what it does, refuses it set wrong
    config_file = tmp_path / "enabled.json"
    config_file.write_text(json.dumps(ENABLED))
    report = json.loads(run_in(copy, CLI, "check-config", "--json", str(config_file)))
    default = report["agents"]["default"]
    assert default["effective"]["loopwatch"]["detectors"]["toolStreak"] == ENABLED_RULE
    assert "toolStreak on: warns at the 3rd call of one tool in a row, blocks the 5th" in default["notes"]
    for document, problems in (
        (REFUSED, REFUSED_PROBLEMS),
        (
            UNORDERED,
            [["loopwatch.detectors.toolStreak.warningThreshold", "must be lower than criticalThreshold"]],
        ),
        (
            {"loopwatch": {"detectors": {"toolStrek": {}}}},
            [["loopwatch.detectors.toolStrek", f"unknown rule (known: {KNOWN_RULES})"]],
        ),
    ):
        config_file.write_text(json.dumps(document))
        said = json.loads(run_in(copy, CLI, "check-config", "--json", str(config_file), status=2))
        assert said["valid"] is False
        assert [[p["path"], p["message"]] for p in said["problems"]] == problems

    # in the schema: its section, its keys with their bounds and defaults; the same verdicts
    schema = json.loads(run_in(copy, CLI, "check-config", "--schema"))
    defs = schema["$defs"]
    assert defs["Detectors"]["properties"]["toolStreak"] == {"$ref": "#/$defs/ToolStreak"}
    assert defs["AgentDetectors"]["properties"]["toolStreak"] == {"$ref": "#/$defs/ToolStreak"}
    streak = defs["ToolStreak"]
    assert streak["properties"]["warningThreshold"] == {
        "type": "integer",
        "exclusiveMinimum": 0,
        "default": 4,
    }
    assert streak["additionalProperties"] is False
    assert "warningThreshold < criticalThreshold" in streak["description"]
    validator = Draft202012Validator(schema)
    assert validator.is_valid(ENABLED)
    assert not validator.is_valid(REFUSED)
    assert not Draft202012Validator(config_schema()).is_valid(ENABLED)  # the checkout's: no such rule

    # judged, restored mid-run as a worker restores it, and compiled
    ran = json.loads(run_in(copy, STEPS))
    assert [tuple(v) for v in ran["uninterrupted"]] == EXPECTED_VERDICTS
    assert ran["resumed"] == ran["uninterrupted"]
    assert ran["restored"] == ["loopwatch.detectors.rules.tool_streak", "ToolStreak", ["read", 4]]
    assert ran["stored_again"] is True
    assert "read was called 5 times in a row, whatever its arguments [tool_streak]" in ran["block_text"]
    assert ran["compiled"] == sorted([*compiled_modules(), "detectors/rules/tool_streak.py"])


# -- the compiled-module list: the registry's rule modules ------------------------------------


def test_the_compiled_modules_are_the_core_s_and_every_rule_module_of_the_registry() -> None:
    compiled = compiled_modules()
    in_registry = {
        f"{type(rule).__module__.removeprefix('loopwatch.').replace('.', '/')}.py" for rule in REGISTRY.rules
    }
    assert in_registry <= set(compiled)
    assert set(rule_modules()) == in_registry
    assert all((ROOT / path).is_file() for path in compiled)
    # a registry that imports one more rule compiles one more module
    source = (ROOT / "detectors" / "rules" / "registry.py").read_text()
    grown = source.replace(IMPORT_AFTER, IMPORT_AFTER + IMPORT_LINE)
    assert compiled_modules(grown) == sorted([*compiled, "detectors/rules/tool_streak.py"])
    # setup.py builds from this list
    setup = (ROOT / "setup.py").read_text()
    assert "COMPILED: list[str] = _core_build().compiled_modules()" in setup
    assert "detectors/rules/" not in setup


# -- the same rule registered in this process, as a rule of one's own is ----------------------


def test_a_rule_registered_at_start_up_brings_its_section_words_and_texts() -> None:
    assert "toolStreak" not in {section.key for section in rule_set().sections}
    with pytest.raises(ConfigError, match="unknown rule"):
        parse_config_value(ENABLED)
    with registered(recipe_rule.RULE):
        config = parse_config_value(ENABLED)
        assert config.default.rules.get(recipe_rule.SECTION) == (True, 3, 5)
        assert config.default.rules.as_dict()["toolStreak"] == ENABLED_RULE
        assert Draft202012Validator(config_schema()).is_valid(ENABLED)
        engine = Engine(config)
        outputs = [out for event in streak_trace().events for out in engine.process(event)]
        assert verdicts(outputs) == EXPECTED_VERDICTS
        assert "whatever its arguments [tool_streak]" in block_text("tool_streak", "read", 5)
        with pytest.raises(ConfigError) as refused:
            parse_config_value(REFUSED)
        assert [[p.path, p.message] for p in refused.value.problems] == REFUSED_PROBLEMS
    # gone with it: its section, its words (a config resolved meanwhile reads its defaults)
    assert "toolStreak" not in {section.key for section in rule_set().sections}
    with pytest.raises(ConfigError, match="unknown rule"):
        parse_config_value(ENABLED)
    assert "a loop was detected" in block_text("tool_streak", "read", 5)
    assert config.default.rules.get(recipe_rule.SECTION) == (True, 3, 5)


def test_a_state_of_a_rule_this_build_does_not_know_passes_through_a_snapshot_unchanged() -> None:
    with registered(recipe_rule.RULE):
        engine = Engine(parse_config_value(ENABLED))
        for event in streak_trace().events[:4]:
            engine.process(event)
        stored = engine.states["run-1"].to_bytes()
    kept = RunState.from_bytes(stored)
    assert type(kept.rule_states["tool_streak"]).__name__ == "KeptState"
    assert kept.to_bytes() == stored


def test_config_refuses_to_guess_before_the_rules_are_handed_in() -> None:
    """A process that reads a config without the registry (which hands the rules' sections in)
    is told so, instead of reading loopwatch.detectors without them."""
    code = (
        "from tests.pure_python import use_sources\nuse_sources()\n"
        "from loopwatch.config import parse_config_value\n"
        "parse_config_value({'loopwatch': {'detectors': {'sameCallStreak': {'enabled': True}}}})\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 1
    assert "import loopwatch.detectors.rules.registry" in done.stderr


def test_a_hook_process_tells_an_own_rule_s_verdict_in_the_words_the_gateway_wrote() -> None:
    """A command hook's process loads none of the core, so not the rules' words: for a rule of
    loopwatch's own it tells the model the gateway's answer's message, which the gateway wrote
    with them; OpenClaw's detectors it words itself, as before."""
    answers = [
        {
            "decision": action,
            "message": words(detector, "read", 5),
            "verdicts": [
                {"type": "verdict", "action": action, "detector": detector, "tool": "read", "count": 5}
            ],
        }
        for action, words in (("block", block_text), ("warn", warning_text))
        for detector in ("same_call_streak", "call_cycle", "loop_budget", "generic_repeat")
    ]
    answers.append(
        {
            "decision": "abort",
            "message": abort_text("loop_budget_exhausted"),
            "verdicts": [{"type": "abort", "reason": "loop_budget_exhausted"}],
        }
    )
    code = (
        "import json, sys\n"
        "from loopwatch.detectors.runtime_texts import decision_text\n"
        "told = [decision_text(answer) for answer in json.loads(sys.stdin.read())]\n"
        "core = [m for m in sys.modules if m.startswith(('loopwatch.config', 'loopwatch.detectors.rule'))]\n"
        "print(json.dumps({'told': told, 'core': core}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], input=json.dumps(answers), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    assert said["core"] == []
    assert said["told"] == [answer["message"] for answer in answers]
    assert "looping has cost twice the loop budget" in said["told"][-1]
    # the gateway's words are the rules' own (and OpenClaw's detectors are worded the same here)
    assert "read was called 5 times in a row with the same arguments" in said["told"][0]
