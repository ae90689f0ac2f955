"""The fast paths of issue 43's hot spots give exactly what the plain computation gives.

* ``outcome_signature``: :func:`unproductive`, :func:`signature` and :func:`signatures` run a
  regular expression only where the text holds what it needs; here they are held to the
  plain form (every expression run on every text, as the module's docstring states the
  rules), on generated texts rich in the markers' pieces, case changes the expressions fold
  (``ı``, ``İ``, ``K``) and quotes, and on every outcome of the real-trajectory corpus.
* ``tool_outage``: a failure that opens nothing no longer merges the window's buckets; stepped
  on random facts, the rule gives the alerts and keeps the state it gives when every failure
  merges them (``_maybe_open`` replaced by ``_open``, the merge with every condition).
"""

from __future__ import annotations

import gzip
import random
import re

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from msgspec import UNSET

from loopwatch.config.fleet_rules import ToolOutageRule
from loopwatch.detectors.decoding import decode_event
from loopwatch.detectors.events import ToolResult
from loopwatch.detectors.fleet import tool_outage
from loopwatch.detectors.fleet.facts import ResultFact
from loopwatch.detectors.outcome_signature import (
    SIGNATURE_LINES,
    outcome_text,
    signature,
    signatures,
    unproductive,
)
from loopwatch.detectors.stable_json import plain
from tests.bench.quality.scoring import CORPUS_DIR

# -- the plain form ---------------------------------------------------------------------------

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
HEX = re.compile(r"[0-9a-f]{8,}")
DIGITS = re.compile(r"[0-9]+")
QUOTED = re.compile(r"\"([^\"\n]{1,200})\"|(?<![a-z0-9])'([^'\n]{1,200})'(?![a-z0-9])|`([^`'\n]{1,200})[`']")
EXIT_STATUS = re.compile(r"<returncode>(-?\d+)</returncode>|exit (?:code|status):? ?(-?\d+)", re.IGNORECASE)
NONE_COUNTED = re.compile(
    r"\b(?:0|no|zero)\s+(?:errors?|failures?|failed|exceptions?)\b"
    r"|\b(?:errors?|failures?|failed|exceptions?)\s*[:=]\s*0\b"
)
FAILURE_MARKERS = re.compile(
    r"\b(?:error|errors|exception|fatal|failed|failure|traceback)\b|[a-z](?:error|exception):"
    r"|not found|no such file|cannot |can't |could not|couldn't|unable to|permission denied"
    r"|\bdenied\b|refused|timed out|does not exist|not exist|no matches|not recognized"
    r"|\binvalid\b|\bunknown\b|\bunexpected\b|usage:"
)


def plain_unproductive(text: str) -> bool:
    status = EXIT_STATUS.search(text)
    if status is not None:
        return int(status.group(1) or status.group(2)) != 0
    lines = [line for line in text.lower().split("\n") if line.strip()]
    if not lines:
        return False
    head = [*lines[:2], lines[-1]]
    return any(FAILURE_MARKERS.search(NONE_COUNTED.sub(" ", line)) is not None for line in head)


def plain_signature(text: str, arguments: str, echo_free: bool) -> str:
    lowered = text.lower()
    if echo_free:

        def emptied(found: re.Match[str]) -> str:
            inner = (found.group(1) or found.group(2) or found.group(3) or "").strip()
            return '""' if inner and inner in arguments else found.group(0)

        lowered = QUOTED.sub(emptied, lowered)
    lowered = DIGITS.sub("0", HEX.sub("x", UUID.sub("x", lowered)))
    kept: list[str] = []
    for line in lowered.split("\n"):
        line = line.strip()
        if not line:
            continue
        tail = line.rsplit(": ", 1)[-1]
        if tail not in kept:
            kept.append(tail)
            if len(kept) >= SIGNATURE_LINES:
                break
    return "\n".join(kept)


def assert_same(text: str, arguments: str) -> None:
    assert unproductive(text, False) is plain_unproductive(text), text
    same, sweep = plain_signature(text, arguments, False), plain_signature(text, arguments, True)
    assert signature(text, arguments, echo_free=False) == same, text
    assert signature(text, arguments, echo_free=True) == sweep, text
    assert signatures(text, arguments) == (same, sweep), text


# -- generated texts --------------------------------------------------------------------------

PIECES = [
    *["error", "errors", "exception", "fatal", "failed", "failure", "traceback", "denied"],
    *["invalid", "unknown", "unexpected"],
    *["not found", "no such file", "cannot ", "can't ", "could not", "couldn't", "unable to"],
    *["permission denied", "refused", "timed out", "does not exist", "not exist", "no matches"],
    *["not recognized", "usage:", "Usage:", "ERROR", "Error:", "valueerror:", "IOException.java"],
    *["0 errors", "no failures", "zero exceptions", "Errors: 0", "failed=0", "0\terror", "no  error"],
    *["<returncode>1</returncode>", "<RETURNCODE>0</returncode>", "<returncode>-2</returncode>"],
    *["exit code 2", "Exit status: 0", "EXIT CODE 7", "exıt code 3", "exİt status 4", "exit code"],
    *["<", "x", "X", "e", "ex", "xit", "ı", "İ", "K", "ſ", "_", "-", ": ", ":", "=", "0", "7"],
    *['"', "'", "`", '"a"', "'b'", "`c`", "`d'", "it's", '"a b"', '""', "foo", "bar", "a"],
    *["123e4567-e89b-12d3-a456-426614174000", "deadbeefcafe", "0x1f", "12345", "9"],
    *["\n", "\n\n", " ", "  ", "\t", "/bin/bash: line 7: foo: command not found"],
]
ARGUMENTS = ["", "a", "a b", "foo bar", "b c d", "k", "deadbeefcafe"]


@settings(max_examples=1500, deadline=None)
@given(
    st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=4)), max_size=24),
    st.sampled_from(ARGUMENTS),
)
def test_the_outcome_functions_give_the_plain_form_s_answers(pieces: list[str], arguments: str) -> None:
    assert_same("".join(pieces), arguments)


def test_the_outcome_functions_give_the_plain_form_s_answers_on_the_corpus() -> None:
    """Every outcome of the real-trajectory corpus (text and arguments as ``same_failure``
    reads them)."""
    compared = 0
    with gzip.open(CORPUS_DIR / "events.jsonl.gz", "rb") as lines:
        for line in lines:
            if not line.strip():
                continue
            event = decode_event(line, texts=True)
            if not isinstance(event, ToolResult):
                continue
            failed = event.error is not UNSET and event.error is not None
            text = outcome_text(plain(event.error if failed else event.result))
            params = event.params
            arguments = "" if params is UNSET or params is None else outcome_text(plain(params)).lower()
            assert_same(text, arguments)
            compared += 1
    assert compared > 30_000


# -- tool_outage ------------------------------------------------------------------------------


def facts_of(seed: int) -> tuple[ToolOutageRule, list[ResultFact]]:
    rng = random.Random(seed)
    rule = ToolOutageRule(
        bucket_s=rng.choice([1, 10, 60]),
        window_buckets=rng.randint(1, 6),
        min_runs=rng.randint(1, 7),
        min_distinct_args=rng.randint(1, 4),
    )
    success = rng.random() * 0.6
    ts = 1_700_000_000_000
    facts = []
    for _ in range(rng.randint(1, 300)):
        jump = rng.randint(-3_000, 8_000) if rng.random() < 0.9 else rng.randint(-60_000, 200_000)
        ts = max(0, ts + jump)
        error = None if rng.random() < success else rng.choice(["E1", "E1", "E2"])
        args = None if rng.random() < 0.1 else f"h{rng.randint(0, 5)}"
        facts.append(ResultFact("read", f"a{rng.randint(0, 4)}", f"r{rng.randint(0, 12)}", ts, error, args))
    return rule, facts


def stepped(rule: ToolOutageRule, facts: list[ResultFact]) -> tuple[list[bytes], bytes]:
    state = tool_outage.OutageState("read")
    alerts = [msgspec.json.encode(tool_outage.step(state, fact, rule)) for fact in facts]
    return alerts, msgspec.json.encode(state)


@pytest.mark.parametrize("block", range(10))
def test_tool_outage_gives_the_alerts_and_state_of_the_full_merge(
    block: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    cases = [facts_of(block * 100 + seed) for seed in range(100)]
    fast = [stepped(rule, facts) for rule, facts in cases]
    monkeypatch.setattr(tool_outage, "_maybe_open", tool_outage._open)
    merged = [stepped(rule, facts) for rule, facts in cases]
    assert fast == merged
    opened = sum(alert.count(b"tool_outage") for alerts, _ in fast for alert in alerts)
    assert opened > 0  # the seeds open outages: the comparison covers the opening too
