"""The agents preset on real agents' runs: the issue's bar on the labelled runs, and every
verdict of the pinned preset on the whole corpus held to its golden file."""

from __future__ import annotations

import json

import pytest

from tests.bench.quality.golden import GOLDEN, preset_outputs, read_golden
from tests.bench.quality.quality_bench import CONFIGS, PRESET, corpus_events, loopwatch_answers
from tests.bench.quality.scoring import Answer, Corpus, load_corpus, score


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return load_corpus()


@pytest.fixture(scope="module")
def preset_answers(corpus: Corpus) -> dict[str, Answer]:
    return loopwatch_answers(corpus_events(corpus.events_path), CONFIGS[PRESET])


def test_the_preset_stops_the_labelled_loops_early_and_no_healthy_run(
    corpus: Corpus, preset_answers: dict[str, Answer]
) -> None:
    found = score(corpus, preset_answers)
    assert (found.loops, found.healthy, found.resolved) == (19, 86, 509)
    assert found.loops_stopped >= 17
    assert found.healthy_stopped == 0
    assert found.median_stop is not None
    assert found.median_stop <= 12
    assert found.resolved_stopped <= 2


def test_openclaws_rules_stay_what_they_were_on_the_same_runs(corpus: Corpus) -> None:
    """The default config (no preset) is untouched by the preset's rules: the corpus README's
    figures for OpenClaw's rules (2 of 19 stopped, 8 warned; no healthy run stopped, 2 warned)."""
    default = next(config for name, config in CONFIGS.items() if name != PRESET)
    found = score(corpus, loopwatch_answers(corpus_events(corpus.events_path), default))
    assert (found.loops_stopped, found.loops_warned) == (2, 8)
    assert (found.healthy_stopped, found.healthy_warned) == (0, 2)


def test_every_verdict_of_the_pinned_preset_is_the_golden_files() -> None:
    golden = read_golden(GOLDEN)
    outputs = preset_outputs()
    assert len(golden) > 1000
    for index, (want, got) in enumerate(zip(golden, outputs, strict=False)):
        assert json.loads(got) == json.loads(want), f"output {index} differs"
    assert len(outputs) == len(golden)
