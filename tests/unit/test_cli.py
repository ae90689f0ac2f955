"""Every subcommand: its normal output and its bad-input paths (clear message, no traceback)."""

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.helpers import FIXTURES, ROOT


def loopwatch(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "loopwatch", *args], capture_output=True, input=stdin, timeout=120
    )


LOWERED = "{tools: {loopDetection: {enabled: true, warningThreshold: 3, criticalThreshold: 5}}}"


def test_replay_compare_reports_the_known_differences(tmp_path: Path) -> None:
    lowered = tmp_path / "lowered.json5"
    lowered.write_text(LOWERED)
    done = loopwatch(
        "replay",
        str(FIXTURES / "openclaw-invalid-write-errors.events.jsonl"),
        "--compare",
        str(lowered),
        "--json",
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["events"] == 26
    assert report["runs"][0]["verdicts"] == 0  # silence at the defaults
    [difference] = report["differences"]
    assert difference["config"]["first_warning"] is None
    # expected-lowered: warning at event 13 (the 7th call), block at event 17 (the 9th)
    assert (difference["compare"]["first_warning"], difference["compare"]["first_block"]) == (7, 9)
    # per detector, as the text table's "with --compare" column: nothing at the defaults
    assert report["detectors"] == {}
    assert sum(report["compare_detectors"].values()) == difference["compare"]["verdicts"] > 0


def test_replay_per_run_first_verdicts(tmp_path: Path) -> None:
    config = tmp_path / "openclaw.json5"
    config.write_text("{tools: {loopDetection: {enabled: true}}, loopwatch: {openclawRevision: '2026-05'}}")
    events = str(FIXTURES / "openclaw-read-error-loop.events.jsonl")
    done = loopwatch("replay", events, "--config", str(config), "--json")
    run = json.loads(done.stdout)["runs"][0]
    assert (run["first_warning"], run["first_block"], run["first_abort"]) == (13, 24, 27)
    assert run["detectors"] == {
        "generic_repeat": 44,
        "global_circuit_breaker": 54,
        "tool_loop_recovery_exhausted": 1,
    }


def test_replay_compare_shows_what_a_revision_upgrade_changes(tmp_path: Path) -> None:
    old = tmp_path / "old.json5"
    old.write_text("{tools: {loopDetection: {enabled: true}}, loopwatch: {openclawRevision: '2026-05'}}")
    new = tmp_path / "new.json5"
    new.write_text("{tools: {loopDetection: {enabled: true}}, loopwatch: {openclawRevision: '2026-08'}}")
    events = str(FIXTURES / "openclaw-read-error-loop.events.jsonl")
    done = loopwatch("replay", events, "--config", str(old), "--compare", str(new), "--json")
    assert done.returncode == 0, done.stderr
    [difference] = json.loads(done.stdout)["differences"]
    # the same calls are warned, blocked and aborted first; the blocked retries count on
    assert difference["config"]["first_block"] == difference["compare"]["first_block"]
    assert "global_circuit_breaker" in difference["config"]["detectors"]
    assert (
        difference["compare"]["detectors"]["generic_repeat"]
        > difference["config"]["detectors"]["generic_repeat"]
    )
    text = loopwatch("replay", events, "--config", str(old), "--compare", str(new)).stdout.decode()
    assert "1 of 1 runs differ" in text
    assert "fired with --compare" in text
    checked = loopwatch("check-config", str(old)).stdout.decode()
    assert "rules: OpenClaw revision 2026-05" in checked


def test_check_config_notes_auto_raise(tmp_path: Path) -> None:
    path = tmp_path / "openclaw.json"
    path.write_text(
        "{tools: {loopDetection: {enabled: true, warningThreshold: 25}}, "
        'agents: {list: [{id: "a", tools: {loopDetection: {criticalThreshold: 40}}}]}}'
    )
    done = loopwatch("check-config", str(path), "--json")
    assert done.returncode == 0
    agents = json.loads(done.stdout)["agents"]
    assert agents["default"]["effective"]["criticalThreshold"] == 26
    assert any("raised to 26" in note for note in agents["default"]["notes"])
    assert agents["a"]["effective"]["globalCircuitBreakerThreshold"] == 41


def test_check_config_explains_the_fleet_wide_rules(tmp_path: Path) -> None:
    path = tmp_path / "openclaw.json"
    path.write_text(
        "{tools: {loopDetection: {enabled: true}}, "
        "loopwatch: {detectors: {toolOutage: {block: true, blockSeconds: 90}, "
        "systemicLoop: {enabled: false}}}}"
    )
    document = json.loads(loopwatch("check-config", str(path), "--json").stdout)
    fleet = document["fleet_rules"]
    assert fleet["effective"]["toolOutage"] == {
        "enabled": True,
        "bucketSeconds": 60,
        "windowBuckets": 5,
        "minRuns": 5,
        "minDistinctArgs": 3,
        "block": True,
        "blockSeconds": 90,
    }
    assert fleet["effective"]["systemicLoop"]["enabled"] is False
    text = loopwatch("check-config", str(path)).stdout.decode()
    assert "blocked while its last failure is under 90 s old" in text
    assert "systemicLoop off" in text


def test_run_reads_stdin() -> None:
    data = (FIXTURES / "openclaw-post-compaction-abort.events.jsonl").read_bytes()
    done = loopwatch("run", "-", stdin=data)
    assert [json.loads(line)["reason"] for line in done.stdout.splitlines()] == ["compaction_loop_persisted"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("run", "missing.jsonl"), "no such file: missing.jsonl"),
        (("replay", "missing.jsonl"), "no such file: missing.jsonl"),
        (("conformance", "missing.jsonl"), "cannot read missing.jsonl"),
        (("check-config", "missing.json"), "cannot read config file"),
        (("run", "--config", "BAD", "-"), "must be a positive integer"),
        (("check-config", "BAD"), "tools.loopDetection.historySize: must be a positive integer"),
        (("check-config", "NOTJSON"), "not valid JSON5"),
        (("replay", "--config", "BAD", "x.jsonl"), "must be a positive integer"),
        (("demo", "--config", "BAD"), "must be a positive integer"),
        (("check-config", "BINARY"), "not a text file (UTF-8): byte 0xff at offset 1"),
        (("run", "--config", "BINARY", "-"), "not a text file (UTF-8)"),
        (("replay", "--config", "BINARY", "x.jsonl"), "not a text file (UTF-8)"),
        (("demo", "--config", "BINARY"), "not a text file (UTF-8)"),
        (("run", "--workers", "0", "-"), "--workers: must be at least 1, got 0"),
        (("run", "--workers", "-1", "-"), "--workers: must be at least 1, got -1"),
        (("demo", "--runs", "-3"), "--runs: must be at least 1, got -3"),
        (("demo", "--runs", "many"), "--runs: must be a whole number, got 'many'"),
    ],
)
def test_bad_input_gives_a_clear_message_and_non_zero_exit(
    args: tuple[str, ...], message: str, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{tools: {loopDetection: {historySize: 0}}}")
    notjson = tmp_path / "notjson.json"
    notjson.write_text("{tools: ")
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"{\xff\x00\x01")
    files = {"BAD": str(bad), "NOTJSON": str(notjson), "BINARY": str(binary)}
    real = [files.get(a, a) for a in args]
    done = loopwatch(*real, stdin=b"")
    assert done.returncode != 0
    assert message in done.stderr.decode()
    assert b"Traceback" not in done.stderr


def test_worker_refuses_invalid_settings_with_every_problem(tmp_path: Path) -> None:
    env_done = subprocess.run(
        [sys.executable, "-m", "loopwatch", "worker"],
        capture_output=True,
        timeout=60,
        env={
            "PATH": "/usr/bin:/bin",
            "LOOPWATCH_PARTITIONS": "0",
            "LOOPWATCH_WEB_PORT": "70000",
            "LOOPWATCH_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "LOOPWATCH_KAFKA_SASL_PASSWORD": "hunter2",
        },
    )
    err = env_done.stderr.decode()
    assert env_done.returncode == 2
    for expected in ("LOOPWATCH_PARTITIONS", "LOOPWATCH_WEB_PORT", "SASL needs a username"):
        assert expected in err
    assert "hunter2" not in err


@pytest.mark.parametrize("command", [["worker", "--config"], ["check-config"], ["gateway", "--config"]])
def test_the_settings_and_the_config_file_are_refused_together(tmp_path: Path, command: list[str]) -> None:
    """Every problem in one go: the file's and the variables' (one source per start before)."""
    bad = tmp_path / "bad.json"
    bad.write_text("{tools: {loopDetection: {historySize: 0}}}")
    done = subprocess.run(
        [sys.executable, "-m", "loopwatch", *command, str(bad)],
        capture_output=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "LOOPWATCH_PARTITIONS": "abc", "LOOPWATCH_WEB_PORT": "0"},
    )
    err = done.stderr.decode()
    assert done.returncode == 2, err
    assert f"{bad}: tools.loopDetection.historySize: must be" in err
    assert "stream settings: LOOPWATCH_PARTITIONS: cannot read 'abc'" in err
    assert "stream settings: LOOPWATCH_WEB_PORT: must be a port number" in err
    assert "Traceback" not in err
    missing = subprocess.run(
        [sys.executable, "-m", "loopwatch", *command, str(tmp_path / "missing.json")],
        capture_output=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "LOOPWATCH_PARTITIONS": "abc"},
    )
    # a problem of the whole file: under the file's name alone
    assert (
        f"  - {tmp_path / 'missing.json'}: cannot read config file: No such file" in missing.stderr.decode()
    )


def test_worker_refuses_to_start_without_a_broker() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "loopwatch", "worker", "--kafka", "127.0.0.1:1"],
        capture_output=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "LOOPWATCH_STARTUP_TIMEOUT_S": "2"},
    )
    assert done.returncode == 2
    assert "unreachable after 2s" in done.stderr.decode()


def test_worker_names_a_web_port_in_use_before_it_starts() -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "loopwatch", "worker", "--kafka", "127.0.0.1:1"],
            capture_output=True,
            timeout=60,
            env={
                "PATH": "/usr/bin:/bin",
                "LOOPWATCH_WEB_PORT": str(port),
                "LOOPWATCH_STARTUP_TIMEOUT_S": "2",
            },
        )
    stderr = done.stderr.decode()
    assert done.returncode == 2
    assert f"LOOPWATCH_WEB_PORT {port} on LOOPWATCH_WEB_HOST 127.0.0.1 is in use" in stderr
    assert "Traceback" not in stderr


def test_every_subcommand_has_help_with_examples() -> None:
    for command in ("run", "replay", "conformance", "demo", "check-config", "worker"):
        done = loopwatch(command, "--help")
        assert done.returncode == 0
        assert b"example" in done.stdout, command


def test_config_comes_from_the_environment_and_the_flag_wins(tmp_path: Path) -> None:
    import os

    bad = tmp_path / "bad.json"
    bad.write_text("{tools: {loopDetection: {historySize: 0}}}")
    good = tmp_path / "good.json"
    good.write_text("{tools: {loopDetection: {enabled: true}}}")
    env = {**os.environ, "LOOPWATCH_CONFIG": str(bad)}
    command = [sys.executable, "-m", "loopwatch", "run"]
    from_env = subprocess.run([*command, "-"], input=b"", env=env, capture_output=True)
    assert from_env.returncode == 2
    assert b"historySize" in from_env.stderr
    one_event = (FIXTURES / "openclaw-post-compaction-abort.events.jsonl").read_bytes().splitlines()[0]
    flag_wins = subprocess.run(
        [*command, "--config", str(good), "-"], input=one_event, env=env, capture_output=True
    )
    assert flag_wins.returncode == 0, flag_wins.stderr
    # set but empty (a compose file's `LOOPWATCH_CONFIG: ${CONFIG:-}`): no file, not "." read
    unset = subprocess.run(
        [*command, "-"], input=one_event, env={**env, "LOOPWATCH_CONFIG": ""}, capture_output=True
    )
    assert unset.returncode == 0, unset.stderr


def wait_until_read_to(pid: int, path: Path, size: int, timeout: float = 60) -> None:
    """Until process ``pid`` has ``path`` open and has read it up to ``size`` (Linux /proc)."""
    import os
    import time

    deadline = time.monotonic() + timeout
    target = str(path.resolve())
    while time.monotonic() < deadline:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") != target:
                    continue
                fields = Path(f"/proc/{pid}/fdinfo/{fd}").read_text().split()
            except OSError:
                continue
            if int(fields[fields.index("pos:") + 1]) >= size:
                return
        time.sleep(0.05)
    raise AssertionError(f"{path} was not read to {size} bytes in {timeout}s")


@contextmanager
def following(events: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``loopwatch run --follow events``, killed at the end. Unbuffered pipes: a buffered reader
    could hold a line where ``select`` cannot see it."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "loopwatch", "run", "--follow", str(events)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        bufsize=0,
    )
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait(10)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def test_run_follows_a_growing_file(tmp_path: Path) -> None:
    import select

    events = tmp_path / "events.jsonl"
    lines = (FIXTURES / "openclaw-post-compaction-abort.events.jsonl").read_bytes().splitlines(keepends=True)
    events.write_bytes(b"".join(lines[:10]))
    with following(events) as proc:
        wait_until_read_to(proc.pid, events, events.stat().st_size)  # it follows the end now
        with events.open("ab") as stream:
            stream.write(b"".join(lines[10:]))
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        assert ready, "no verdict within 60 s of the file growing"
        first = proc.stdout.readline()
        assert json.loads(first)["reason"] == "compaction_loop_persisted"


def test_run_on_input_without_one_valid_event_says_so_and_fails(tmp_path: Path) -> None:
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(b"\x80\x01\x00garbage\n" + bytes(range(128, 256)) + b"\n")  # (no UTF-16 mark)
    done = loopwatch("run", str(binary))
    assert done.returncode == 1
    stderr = done.stderr.decode()
    assert f"{binary}:1: not valid JSON" in stderr
    assert "2 of 2 lines were not valid events (skipped)" in stderr
    assert "OpenClaw session transcripts are read by `loopwatch replay`" in stderr
    assert b"Traceback" not in done.stderr


def test_run_processes_the_valid_lines_around_invalid_ones(tmp_path: Path) -> None:
    lines = (FIXTURES / "openclaw-read-error-loop.events.jsonl").read_bytes().splitlines()
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_bytes(b"\n".join([b"{broken", *lines[:150], b'{"type":"tool_call"}', *lines[150:]]) + b"\n")
    whole = loopwatch("run", str(FIXTURES / "openclaw-read-error-loop.events.jsonl"))
    done = loopwatch("run", str(mixed))
    assert done.returncode == 0
    assert done.stdout == whole.stdout
    assert whole.stdout.count(b"\n") > 10
    assert "2 of 261 lines were not valid events (skipped)" in done.stderr.decode()


def test_replay_reports_loop_spend_and_what_a_stricter_config_saves(tmp_path: Path) -> None:
    import msgspec

    from loopwatch.detectors.events import ToolCall, Usage, encode_event
    from tests.helpers import Trace

    trace = Trace("costly", agent_id="coder")
    for _ in range(30):
        trace.both("read", {"path": "/missing"}, error="ENOENT")
        call = trace.events[-2]
        assert isinstance(call, ToolCall)
        trace.events[-2] = msgspec.structs.replace(call, usage=Usage(cost_usd=0.5))
    events = tmp_path / "events.jsonl"
    events.write_bytes(b"\n".join(encode_event(e) for e in trace.events) + b"\n")
    stricter = tmp_path / "stricter.json5"
    stricter.write_text(LOWERED)
    done = loopwatch("replay", str(events), "--compare", str(stricter), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    # defaults: first warning at call 11, abort at call 22 (the second critical)
    assert (report["spend"]["spend_usd"], report["spend"]["loop_spend_usd"]) == (15.0, 10.0)
    assert report["spend"]["saved_usd"] == 4.0  # calls 23-30
    # warning at call 4, abort at call 7: loop spend from call 4, calls 8-30 saved
    assert report["compare_spend"]["loop_spend_usd"] == 13.5
    assert report["compare_spend"]["saved_usd"] == 11.5
    assert report["spend"]["per_agent"][0]["name"] == "coder"
    text = loopwatch("replay", str(events), "--compare", str(stricter)).stdout.decode()
    assert "what loops cost" in text
    assert "with --compare it saves $11.50 (+$7.50)" in text


def test_check_config_explains_the_own_rules_per_agent(tmp_path: Path) -> None:
    path = tmp_path / "openclaw.json5"
    path.write_text(
        "{tools: {loopDetection: {enabled: true}}, loopwatch: {detectors: {loopBudget: {usd: 2}}},"
        " agents: {list: [{id: 'coder', loopwatch: {detectors: {editUndo: {enabled: true}}}}]}}"
    )
    done = loopwatch("check-config", str(path), "--json")
    assert done.returncode == 0, done.stderr
    agents = json.loads(done.stdout)["agents"]
    assert agents["coder"]["effective"]["loopwatch"]["detectors"]["editUndo"]["enabled"] is True
    assert agents["default"]["effective"]["loopwatch"]["detectors"]["editUndo"]["enabled"] is False
    assert any("blocked at $2.00 and aborted at $4.00" in note for note in agents["coder"]["notes"])
    assert any(note.startswith("editUndo on") for note in agents["coder"]["notes"])


ABORT_FIXTURE = FIXTURES / "openclaw-post-compaction-abort.events.jsonl"


def test_run_leaves_the_output_alone_when_the_input_is_missing(tmp_path: Path) -> None:
    kept = tmp_path / "verdicts.jsonl"
    kept.write_bytes(b"earlier verdicts\n")
    done = loopwatch("run", str(tmp_path / "typo.jsonl"), "-o", str(kept))
    assert done.returncode == 2
    assert f"no such file: {tmp_path / 'typo.jsonl'}" in done.stderr.decode()
    assert kept.read_bytes() == b"earlier verdicts\n"


def test_run_refuses_to_write_its_verdicts_over_its_input(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    events.write_bytes(ABORT_FIXTURE.read_bytes())
    for output in (events, tmp_path / "." / "events.jsonl"):
        done = loopwatch("run", str(tmp_path), "-o", str(output))
        assert done.returncode == 2
        assert "writing would destroy the events" in done.stderr.decode()
        assert events.read_bytes() == ABORT_FIXTURE.read_bytes()


@pytest.mark.parametrize(
    ("output", "problem"),
    [(".", "is a folder, not a file"), ("missing/verdicts.jsonl", "does not exist")],
)
def test_run_names_an_output_it_cannot_write(tmp_path: Path, output: str, problem: str) -> None:
    done = loopwatch("run", str(ABORT_FIXTURE), "-o", str(tmp_path / output))
    assert done.returncode == 2
    stderr = done.stderr.decode()
    assert f"--output {tmp_path / output}" in stderr
    assert problem in stderr
    assert "Traceback" not in stderr


def test_run_cannot_follow_stdin_and_says_so() -> None:
    done = loopwatch("run", "--follow", "-", stdin=ABORT_FIXTURE.read_bytes())
    assert done.returncode == 2
    assert "--follow needs a file" in done.stderr.decode()


def test_run_reads_an_events_file_that_starts_with_a_byte_order_mark(tmp_path: Path) -> None:
    marked = tmp_path / "events.jsonl"
    marked.write_bytes(b"\xef\xbb\xbf" + ABORT_FIXTURE.read_bytes())
    done = loopwatch("run", str(marked))
    assert done.returncode == 0, done.stderr.decode()
    assert "skipped" not in done.stderr.decode()
    assert done.stdout == loopwatch("run", str(ABORT_FIXTURE)).stdout != b""


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be", "utf-32"])
def test_run_names_a_utf_16_file_once_and_how_to_convert_it(tmp_path: Path, encoding: str) -> None:
    wide = tmp_path / "events.jsonl"  # what PowerShell's `>` writes
    wide.write_bytes(ABORT_FIXTURE.read_text().encode(encoding))
    done = loopwatch("run", str(wide))
    assert done.returncode == 1
    stderr = done.stderr.decode()
    assert stderr.count("skipped invalid event") == 1
    assert f"{wide}:1: the input is UTF-16 or UTF-32 text" in stderr
    assert "Set-Content -Encoding utf8" in stderr
    replayed = loopwatch("replay", str(wide))
    assert replayed.stderr.decode().count("UTF-16 or UTF-32") == 1, replayed.stderr.decode()


def test_run_follow_reports_a_bad_line_at_its_own_number(tmp_path: Path) -> None:
    import select

    events = tmp_path / "events.jsonl"
    lines = ABORT_FIXTURE.read_bytes().splitlines(keepends=True)
    events.write_bytes(b"".join(lines[:2]) + b"not json\n" + b"".join(lines[2:4]) + b"{}\n")
    with following(events) as proc:
        assert proc.stderr is not None
        reported: list[str] = []
        while len(reported) < 2:
            ready, _, _ = select.select([proc.stderr], [], [], 60)
            assert ready, f"not both bad lines reported within 60 s: {reported}"
            reported.append(proc.stderr.readline().decode())
        assert f"at {events}:3: not valid JSON" in reported[0]
        assert f"at {events}:6: " in reported[1]


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (
            ["--since", "2026-12-01", str(ABORT_FIXTURE)],
            "--since applies to a Kafka source (kafka:TOPIC) only",
        ),
        (["kafka:"], "kafka: names no topic"),
        (["kafka:t", "--since", "yesterday"], "--since 'yesterday': not an ISO time"),
        (
            ["kafka:t", "--since", "2026-12-02", "--until", "2026-12-01"],
            "--until 2026-12-01 is before --since",
        ),
    ],
)
def test_replay_checks_its_source_and_window_first(args: list[str], problem: str) -> None:
    done = loopwatch("replay", *args)
    assert done.returncode == 2
    assert problem in done.stderr.decode()


def test_replay_names_an_unreachable_kafka_without_a_traceback() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "loopwatch", "replay", "kafka:loopwatch.tool-events"],
        capture_output=True,
        env={**os.environ, "LOOPWATCH_KAFKA_BOOTSTRAP": "127.0.0.1:1"},
        timeout=120,
    )
    stderr = done.stderr.decode()
    assert done.returncode == 2
    assert "loopwatch: Kafka at 127.0.0.1:1 (LOOPWATCH_KAFKA_BOOTSTRAP): " in stderr
    assert "Traceback" not in stderr


def test_check_config_reads_stdin_given_as_dash() -> None:
    done = loopwatch("check-config", "-", stdin=b"{tools: {loopDetection: {enabled: true, historySize: 50}}}")
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().startswith("<stdin>: valid")
    assert '"historySize": 50' in done.stdout.decode()
    near = loopwatch("check-config", "-", stdin=b"{agents: {lisst: []}}")
    assert "loopwatch: <stdin>: warning: agents.lisst: did you mean `agents.list`?" in near.stderr.decode()


def test_check_config_json_reports_an_invalid_config_as_json(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json5"
    bad.write_text('{tools: {loopDetection: {enabled: "yes", historySize: -1}}}')
    done = loopwatch("check-config", "--json", str(bad))
    assert done.returncode == 2
    report = json.loads(done.stdout)
    assert report["valid"] is False
    assert {(p["source"], p["path"]) for p in report["problems"]} == {
        (str(bad), "tools.loopDetection.enabled"),
        (str(bad), "tools.loopDetection.historySize"),
    }
    valid = loopwatch("check-config", "--json", "-", stdin=b"{}")
    assert json.loads(valid.stdout)["valid"] is True


def test_version_and_an_unknown_flag_with_the_command_s_own_usage() -> None:
    version = loopwatch("--version")
    assert version.returncode == 0
    assert version.stdout.decode().startswith("loopwatch ")
    unknown = loopwatch("run", "--bogus", str(ABORT_FIXTURE))
    assert unknown.returncode == 2
    stderr = unknown.stderr.decode()
    assert "usage: loopwatch run " in stderr
    assert "loopwatch run: error: unrecognized arguments: --bogus" in stderr


def test_run_serve_given_the_events_file_says_to_name_it_first() -> None:
    done = loopwatch("run", "--serve", str(ABORT_FIXTURE), stdin=b"")
    assert done.returncode == 2
    assert "looks like an input file: name it before --serve" in done.stderr.decode()


def test_run_given_a_transcript_points_to_replay_and_import_at_once() -> None:
    transcript = ROOT / "tests" / "data" / "transcripts" / "openclaw-process-poll-loop.session.jsonl"
    done = loopwatch("run", str(transcript))
    assert done.returncode == 1  # as any input without one event line
    stderr = done.stderr.decode()
    assert f"{transcript} is an OpenClaw session transcript, not event lines" in stderr
    assert f"`loopwatch replay {transcript}`" in stderr
    assert "skipped invalid event" not in stderr


def test_the_event_lines_of_run_s_help_are_valid_events() -> None:
    helped = loopwatch("run", "--help").stdout.decode()
    shown = [line.strip() for line in helped.splitlines() if line.strip().startswith('{"type"')]
    assert len(shown) == 4
    done = loopwatch("run", "-", stdin="\n".join(shown).encode())
    assert done.returncode == 0
    assert "skipped" not in done.stderr.decode()


@pytest.mark.parametrize(
    "args",
    [
        ["hook", "claude"],
        ["hook"],
        ["hook", "claude-code", "--bogus"],
        ["hook", "codex", "--timeout-ms", "0"],
    ],
)
def test_a_mistake_in_the_hook_s_command_lets_the_call_through_unless_fail_closed(args: list[str]) -> None:
    """argparse's exit 2 is what Claude Code, Codex and Gemini CLI take for a refusal."""
    call = b'{"session_id": "s", "hook_event_name": "PreToolUse", "tool_name": "Read", "tool_input": {}}'
    opened = loopwatch(*args, stdin=call)
    assert opened.returncode == 1
    assert "the call is let through: fix the hook command" in opened.stderr.decode()
    closed = loopwatch(*args, "--fail-closed", stdin=call)
    assert closed.returncode == 2
    assert "refused (--fail-closed)" in closed.stderr.decode()


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("0", "must be at least 1, got 0"),  # every call would be allowed, timed out, unasked
        ("-5", "must be at least 1, got -5"),
        ("70000", "must be at most 60000 (a minute), got 70000"),
        ("abc", "must be a whole number, got 'abc'"),
    ],
)
def test_gateway_refuses_a_decide_timeout_that_would_allow_every_call(value: str, problem: str) -> None:
    done = loopwatch("gateway", "--kafka", "127.0.0.1:1", "--decide-timeout-ms", value)
    assert done.returncode == 2
    assert f"argument --decide-timeout-ms: {problem}" in done.stderr.decode()


def test_gateway_says_the_decide_timeout_is_the_kafka_backend_s() -> None:
    done = loopwatch("gateway", "--listen", "127.0.0.1:0", "--decide-timeout-ms", "100")
    assert done.returncode != 0
    assert "--decide-timeout-ms bounds the wait for the Kafka workers (--kafka)" in done.stderr.decode()


def test_a_fatal_error_is_a_json_line_under_json_logs(tmp_path: Path) -> None:
    import os

    env = {**os.environ, "LOOPWATCH_LOG_FORMAT": "json"}
    missing = tmp_path / "missing.json5"
    done = subprocess.run(
        [sys.executable, "-m", "loopwatch", "worker", "--config", str(missing)],
        capture_output=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 2
    [line] = done.stderr.decode().splitlines()
    fatal = json.loads(line)
    assert (fatal["level"], fatal["command"], fatal["exit"]) == ("error", "worker", 2)
    assert str(missing) in fatal["event"]
    assert fatal["timestamp"].endswith("Z")
    plain = loopwatch("worker", "--config", str(missing))
    assert plain.stderr.decode().startswith("loopwatch: ")
    flagged = loopwatch("worker", "--log-format", "json", "--config", str(missing))
    assert json.loads(flagged.stderr.decode().splitlines()[-1])["command"] == "worker"


def test_a_config_file_from_the_environment_is_named_with_its_variable(tmp_path: Path) -> None:
    import os

    bad = tmp_path / "bad.json5"
    bad.write_text("{tools: {loopDetection: {enabled: 7}}}")
    for path, problem in ((bad, "must be a boolean"), (tmp_path / "nope.json5", "cannot read config file")):
        done = subprocess.run(
            [sys.executable, "-m", "loopwatch", "run", str(ABORT_FIXTURE)],
            capture_output=True,
            env={**os.environ, "LOOPWATCH_CONFIG": str(path)},
            timeout=120,
        )
        stderr = done.stderr.decode()
        assert done.returncode == 2
        assert f"invalid configuration in {path} (from LOOPWATCH_CONFIG)" in stderr
        assert problem in stderr
    flagged = loopwatch("run", "--config", str(bad), str(ABORT_FIXTURE))
    assert f"invalid configuration in {bad} (1 problem(s))" in flagged.stderr.decode()


def test_run_follow_names_a_utf_16_file_once(tmp_path: Path) -> None:
    import select
    import time

    wide = tmp_path / "events.jsonl"
    wide.write_bytes(ABORT_FIXTURE.read_text().encode("utf-16"))
    with following(wide) as proc:
        wait_until_read_to(proc.pid, wide, wide.stat().st_size)
        assert proc.stderr is not None
        said = b""
        deadline = time.monotonic() + 3  # (every line was read at once: their reports come together)
        while time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stderr], [], [], 0.2)
            if ready:
                said += proc.stderr.read(65536)
    text = said.decode()
    assert text.count("skipped invalid event") == 1, text
    assert "the input is UTF-16 or UTF-32 text" in text
