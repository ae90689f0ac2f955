"""Real agent CLIs for integration tests: pinned npm packages installed into ``.tools/`` by the
scripts here (``codex.sh``, ``gemini.sh``), and helpers that run them headless against a fake
model on 127.0.0.1 (``codex_cli.py``, ``gemini_cli.py``)."""
