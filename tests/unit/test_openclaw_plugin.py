"""The OpenClaw plugin (``integrations/openclaw``) with Node's test runner, against a real
``loopwatch gateway`` process. Node is part of the test machine: without it this fails."""

import os
import re
import shutil
import subprocess
import sys

from tests.helpers import ROOT


def test_the_plugins_node_tests_pass() -> None:
    node = shutil.which("node")
    assert node, "node is required for the OpenClaw plugin's tests"
    done = subprocess.run(
        [node, "--test", "integrations/openclaw/test/"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "LOOPWATCH_PYTHON": sys.executable},
        timeout=180,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "# fail 0" in done.stdout
    written = len(
        re.findall(r"^test\(", (ROOT / "integrations/openclaw/test/plugin.test.js").read_text(), re.M)
    )
    assert written >= 9
    assert f"# pass {written}" in done.stdout  # every test written ran (none skipped)
