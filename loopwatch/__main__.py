"""``python -m loopwatch``: the same command line as ``loopwatch``."""

from loopwatch.streams.cli.main import main

raise SystemExit(main())
