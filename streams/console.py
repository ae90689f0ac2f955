"""The rich console the command line prints its reports on.

On a terminal: the terminal's width. Otherwise (a pipe, a file, CI logs): room for the
widest table (tables take only the width their content needs), so names are neither cut
nor wrapped, whatever ``COLUMNS`` a parent process left behind; and no colour codes.
"""

from __future__ import annotations

from typing import TextIO

from rich.console import Console

__all__ = ["report_console"]

UNBOUNDED = 240


def report_console(file: TextIO | None = None) -> Console:
    probe = Console(file=file)
    if probe.is_terminal:
        return probe
    return Console(file=file, width=UNBOUNDED, no_color=True, highlight=False)
