from pathlib import Path

import pytest

from loopwatch.config import ConfigError, FleetConfig, merge_agent, parse_config_text, resolve, validate_block


def test_defaults_and_enabled_states() -> None:
    resolved = resolve(None)
    assert (resolved.history_size, resolved.warning_threshold, resolved.critical_threshold) == (30, 10, 20)
    assert resolved.global_circuit_breaker_threshold == 30
    assert resolved.guard_window == 3
    assert not resolved.enabled
    assert resolved.records_calls
    assert resolved.guard_enabled
    off = resolve({"enabled": False})
    assert not off.records_calls
    assert not off.guard_enabled


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        ({"warningThreshold": 10, "criticalThreshold": 5}, (10, 11, 30)),
        ({"warningThreshold": 30}, (30, 31, 32)),
        ({"criticalThreshold": 30, "globalCircuitBreakerThreshold": 30}, (10, 30, 31)),
        (
            {"warningThreshold": "5", "criticalThreshold": 0, "globalCircuitBreakerThreshold": 2.5},
            (10, 20, 30),
        ),
    ],
)
def test_auto_raise_and_positive_int_fallback(
    block: dict[str, object], expected: tuple[int, int, int]
) -> None:
    r = resolve(block)
    assert (r.warning_threshold, r.critical_threshold, r.global_circuit_breaker_threshold) == expected


def test_merge_is_key_by_key_for_nested_objects() -> None:
    merged = merge_agent(
        {
            "enabled": False,
            "warningThreshold": 5,
            "detectors": {"pingPong": False},
            "postCompactionGuard": {"windowSize": 2},
        },
        {"enabled": True, "detectors": {"genericRepeat": False}},
    )
    r = resolve(merged)
    assert r.enabled
    assert r.warning_threshold == 5
    assert r.guard_window == 2
    assert (r.generic_repeat, r.known_poll_no_progress, r.ping_pong) == (False, True, False)


def test_validation_lists_every_problem_with_its_path() -> None:
    problems = validate_block(
        {
            "enabled": "yes",
            "historySize": 0,
            "bogus": 1,
            "detectors": {"pingPong": 1, "x": True},
            "warningThreshold": 20,
            "criticalThreshold": 10,
        },
        "tools.loopDetection",
    )
    text = [str(p) for p in problems]
    assert (
        "tools.loopDetection.bogus: unknown key (known: enabled, historySize, warningThreshold, "
        "unknownToolThreshold, criticalThreshold, globalCircuitBreakerThreshold, detectors, "
        "postCompactionGuard)"
    ) in text
    assert "tools.loopDetection.enabled: must be a boolean" in text
    assert "tools.loopDetection.historySize: must be a positive integer" in text
    assert "tools.loopDetection.detectors.pingPong: must be a boolean" in text
    assert (
        "tools.loopDetection.detectors.x: unknown key (known: genericRepeat, knownPollNoProgress, pingPong)"
        in text
    )
    assert "tools.loopDetection.warningThreshold: must be lower than criticalThreshold." in text


def test_ordering_message_for_global() -> None:
    problems = validate_block({"criticalThreshold": 30, "globalCircuitBreakerThreshold": 30}, "p")
    assert [p.message for p in problems] == [  # OpenClaw's own sentence
        "tools.loopDetection.criticalThreshold must be lower than globalCircuitBreakerThreshold."
    ]
    agent = validate_block(
        {"warningThreshold": 9, "criticalThreshold": 9}, "agents.list[0].tools.loopDetection"
    )
    assert [str(p) for p in agent] == [
        "agents.list[0].tools.loopDetection.warningThreshold: must be lower than criticalThreshold."
    ]


OPENCLAW_FILE = """
// a real-looking openclaw.json (JSON5)
{
  gateway: { port: 18789 },
  tools: { loopDetection: { enabled: true, warningThreshold: 8, } },
  agents: {
    list: [
      { id: "coder", tools: { loopDetection: { criticalThreshold: 12 } } },
      { id: "plain" },
    ],
    entries: { ops: { tools: { loopDetection: { enabled: false } } } },
  },
  loopwatch: { digest: "sha256", criticalBlocksBeforeAbort: 2 },
}
"""


def test_openclaw_file_with_agents_and_settings() -> None:
    config = parse_config_text(OPENCLAW_FILE, "openclaw.json")
    assert config.for_agent("coder").critical_threshold == 12
    assert config.for_agent("coder").warning_threshold == 8
    assert config.for_agent("plain").critical_threshold == 20
    assert not config.for_agent("ops").enabled
    assert config.settings.digest == "sha256"
    assert config.settings.critical_blocks_before_abort == 2


def test_bad_file_reports_all_problems_at_once() -> None:
    text = """{tools: {loopDetection: {enabled: 1}},
      agents: {list: [{id: "a", tools: {loopDetection: {historySize: -1}}},
                      {id: "b", tools: {loopDetection: {nope: true}}}]},
      loopwatch: {digest: "md5", seenEventIds: 3}}"""
    with pytest.raises(ConfigError) as info:
        parse_config_text(text, "bad.json")
    paths = [p.path for p in info.value.problems]
    assert paths == [
        "tools.loopDetection.enabled",
        "agents.list[0].tools.loopDetection.historySize",
        "agents.list[1].tools.loopDetection.nope",
        "loopwatch.digest",
        "loopwatch.seenEventIds",
    ]
    assert "bad.json" in str(info.value)


def test_not_json5() -> None:
    with pytest.raises(ConfigError, match="not valid JSON5"):
        parse_config_text("{tools: ", "x.json")


def test_a_json5_mistake_is_told_at_its_line_and_column_under_the_file_s_name() -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config_text("{\n  tools: {\n    loopDetection: {enabled: true,, }\n  }\n}\n", "x.json5")
    message = str(refused.value)
    assert "in x.json5" in message
    assert "not valid JSON5: line 3, column " in message
    assert "<string>" not in message


@pytest.mark.parametrize("text", ["[" * 100_000, '{"a":' * 100_000])
def test_a_config_nested_beyond_the_parser_s_depth_is_a_config_error(text: str) -> None:
    with pytest.raises(ConfigError, match=r"in x\.json .*\n  - not valid JSON5: nested too deeply"):
        parse_config_text(text, "x.json")


def test_agent_override_is_validated() -> None:
    base = FleetConfig.enabled_default()
    assert base.with_agent_block("a", {"warningThreshold": 3}).for_agent("a").warning_threshold == 3
    with pytest.raises(ConfigError):
        base.with_agent_block("a", {"warningThreshold": 0})


def test_keys_one_letter_or_a_case_away_get_a_did_you_mean() -> None:
    from loopwatch.config.near_misses import near_misses

    document = {
        "tool": {"loopDetection": {}},
        "Agents": {"list": [{"id": "a", "tools": {"loopdetection": {}, "exec": {}}}]},
        "agent": {"model": "x"},  # a real (legacy) OpenClaw key
        "gateway": {},
        "tools": {"loopDetectio": {}, "elevated": {}},
        "loopwatch": {},
    }
    assert near_misses(document) == [
        "tool: did you mean `tools`? (ignored: loopwatch reads `tools`)",
        "Agents: did you mean `agents`? (ignored: loopwatch reads `agents`)",
        "tools.loopDetectio: did you mean `tools.loopDetection`? "
        "(ignored: loopwatch reads `tools.loopDetection`)",
    ]
    fleet = parse_config_text(
        '{tools: {loopDetection: {enabled: true}}, agents: {list: [{id: "a", tools: {LoopDetection: {}}}]}}'
    )
    assert fleet.warnings == (
        "agents.list[0].tools.LoopDetection: did you mean `agents.list[0].tools.loopDetection`? "
        "(ignored: loopwatch reads `agents.list[0].tools.loopDetection`)",
    )


def test_an_agent_entry_s_keys_and_the_agents_object_s_get_a_did_you_mean() -> None:
    """A typo there drops one agent's override silently: the agent runs on the global rules."""
    from loopwatch.config.near_misses import near_misses

    document = {
        "agents": {
            "list": [
                {"id": "a", "tool": {"loopDetection": {}}, "model": "x", "workspace": "w"},
                {"id": "b", "loopWatch": {"detectors": {}}, "identity": {}, "subagents": {}},
            ],
            "entry": {"c": {}},
            "defaults": {},
        },
    }
    assert near_misses(document) == [
        "agents.entry: did you mean `agents.entries`? (ignored: loopwatch reads `agents.entries`)",
        "agents.list[0].tool: did you mean `agents.list[0].tools`? "
        "(ignored: loopwatch reads `agents.list[0].tools`)",
        "agents.list[1].loopWatch: did you mean `agents.list[1].loopwatch`? "
        "(ignored: loopwatch reads `agents.list[1].loopwatch`)",
    ]
    assert near_misses({"agents": {"lists": []}}) == [
        "agents.lists: did you mean `agents.list`? (ignored: loopwatch reads `agents.list`)"
    ]


def test_the_command_line_prints_the_warnings_and_goes_on(tmp_path: Path) -> None:
    import subprocess
    import sys

    path = tmp_path / "openclaw.json5"
    path.write_text("{tools: {loopdetection: {enabled: true}}}")
    done = subprocess.run([sys.executable, "-m", "loopwatch", "check-config", str(path)], capture_output=True)
    assert done.returncode == 0
    assert "warning: tools.loopdetection: did you mean `tools.loopDetection`?" in done.stderr.decode()
    assert "enabled is not set: rolling detection is off" in done.stdout.decode()


@pytest.mark.parametrize(
    "text",
    [
        '{"tools": {"loopDetection": {"enabled": true, "historySize": 30}}}',
        '{"a": [1, -0, 2.5, 1e400, 123456789012345678901234567890, NaN, -Infinity, null]}',
        '{"k": "\\u00e9\\ud83d\\ude00 \\" \\\\ \\/", "k": "last"}',
        "{tools: {loopDetection: {enabled: true,},}, // JSON5\n}",
        "[1, 2, 3]",
    ],
)
def test_config_text_has_the_value_json5_gives_it(text: str) -> None:
    """Plain JSON takes the stdlib's parser (a 700 KB fleet file took 5 s through JSON5's)."""
    import math

    import json5

    from loopwatch.config.fleet import json5_value

    def same(a: object, b: object) -> bool:
        if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
            return math.isnan(b)
        if isinstance(a, dict) and isinstance(b, dict):
            return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
        if isinstance(a, list) and isinstance(b, list):
            return len(a) == len(b) and all(map(same, a, b))
        return type(a) is type(b) and a == b

    assert same(json5_value(text), json5.loads(text))
