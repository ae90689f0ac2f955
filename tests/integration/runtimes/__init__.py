"""Real agent CLIs for integration tests: pinned npm packages installed into ``.tools/`` by the
scripts here (``codex.sh``, ``gemini.sh``, ``claude-code.sh``), helpers that run them headless
against a fake model on 127.0.0.1 (``codex_cli.py``, ``gemini_cli.py`` on ``process.py``), a
recording hook (``recording_hook.py``), and what the tests of loopwatch inside them share
(``loopwatch_checks.py``)."""
