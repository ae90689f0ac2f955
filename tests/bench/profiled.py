"""``loopwatch`` under cProfile, for the benches' ``--profile``.

``python -m tests.bench.profiled OUT.pstats gateway|worker [args]`` runs the command as ``loopwatch``
does, profiled on the process's CPU time (``time.process_time``: a process waiting for the
machine's other processes is not charged for it); the statistics are written to
``OUT.pstats`` when it exits (SIGTERM). The profile starts at :data:`START` (the bench sends it after
its warm-up: the start's metadata and connections are not what a decision costs).
``python -m pstats OUT.pstats`` reads them. Only Python-level calls are seen: the event loop's
own work in uvloop's C is not.
"""

from __future__ import annotations

import atexit
import cProfile
import signal
import sys
import time
from types import FrameType

#: The signal that starts the profile: SIGWINCH, which no loopwatch process takes (faust's
#: worker takes SIGUSR1 and SIGUSR2) and whose default is to be ignored.
START = signal.SIGWINCH


def main() -> int:
    out, *args = sys.argv[1:]
    profile = cProfile.Profile(time.process_time)

    def dump() -> None:
        profile.disable()
        profile.dump_stats(out)

    def start(_signal: int, _frame: FrameType | None) -> None:
        profile.enable()

    atexit.register(dump)
    signal.signal(START, start)
    from loopwatch.streams.cli.main import main as loopwatch

    return loopwatch(args)


if __name__ == "__main__":
    raise SystemExit(main())
