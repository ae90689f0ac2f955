"""``loopwatch --version`` names the core that runs: the compiled one (mypyc's modules and the C
ones) as ``make setup`` builds it, the pure Python one on the install built without a C compiler
(``make packaging`` runs the unit tests there, with ``LOOPWATCH_PURE_PYTHON=1``)."""

import os

import pytest

from loopwatch.detectors.core_build import core_build
from loopwatch.streams.cli.main import main

EXPECTED = "pure Python core" if os.environ.get("LOOPWATCH_PURE_PYTHON") else "compiled core"


def test_the_core_is_the_one_the_suite_runs_on() -> None:
    assert core_build() == EXPECTED


def test_version_names_the_core(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    said = capsys.readouterr().out.strip()
    assert said.startswith("loopwatch ")
    assert said.endswith(f" ({EXPECTED})")
