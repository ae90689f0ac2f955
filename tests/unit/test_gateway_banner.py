"""What `loopwatch gateway` says when it starts: where it is and where its dashboard is."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from tests.helpers import ROOT


def test_the_gateway_prints_its_dashboard_url_and_the_page_opens_without_a_token() -> None:
    env = {**os.environ, "LOOPWATCH_GATEWAY_TOKENS": "t1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "loopwatch", "gateway", "--listen", "127.0.0.1:0"],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    try:
        assert proc.stderr is not None
        first, second = proc.stderr.readline(), proc.stderr.readline()
        gateway = re.search(r"gateway at (http://\S+)", first)
        dashboard = re.search(r"dashboard at (http://\S+/dashboard) \(it asks for a token\)", second)
        assert gateway, first
        assert dashboard, second
        assert dashboard.group(1) == gateway.group(1) + "/dashboard"
        with urllib.request.urlopen(dashboard.group(1), timeout=10) as page:  # its script asks the token
            assert page.status == 200
            assert b"/dashboard/app.js" in page.read()
        with pytest.raises(urllib.error.HTTPError) as refused:  # the data behind it needs the token
            urllib.request.urlopen(gateway.group(1) + "/fleet/overview", timeout=10)
        assert refused.value.code == 401
        refused.value.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
        if proc.stderr is not None:
            proc.stderr.close()


def test_the_gateway_s_help_says_which_routes_are_open() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "loopwatch", "gateway", "--help"], capture_output=True, text=True, cwd=ROOT
    )
    text = " ".join(done.stdout.split())
    assert "every route needs a bearer token but /health and the dashboard's page" in text
