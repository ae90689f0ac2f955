"""A real headless Chromium (Debian's ``chromium``) driven over the DevTools protocol.

Started with the flags the issue names (``--headless --no-sandbox --disable-gpu
--disable-background-networking``) plus a throw-away profile and ``--remote-debugging-port=0``;
the port is read from the profile's ``DevToolsActivePort`` file. Only what the dashboard tests
need: open a URL, evaluate JavaScript, wait for a condition, take a screenshot.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

__all__ = ["Chromium", "chromium_binary"]

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
    "--window-size=1400,1100",
)


def chromium_binary() -> str:
    """Debian's chromium (or LOOPWATCH_TEST_CHROMIUM); the test fails, not skips, without it."""
    found = os.environ.get("LOOPWATCH_TEST_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(found).exists():
        raise AssertionError(
            f"Chromium not found at {found}: the test command installs Debian's chromium "
            "(docker/services.sh up); set LOOPWATCH_TEST_CHROMIUM to use another binary"
        )
    return found


class Chromium:
    """``async with Chromium() as browser: await browser.open(url)``."""

    def __init__(self, binary: str | None = None) -> None:
        self.binary = binary or chromium_binary()
        self._ids = itertools.count(1)
        self._profile = tempfile.TemporaryDirectory(prefix="loopwatch-chromium-", ignore_cleanup_errors=True)
        self._process: subprocess.Popen[bytes] | None = None
        self._session: aiohttp.ClientSession | None = None
        self._socket: aiohttp.ClientWebSocketResponse | None = None

    async def __aenter__(self) -> Chromium:
        profile = Path(self._profile.name)
        with (profile / "chromium.log").open("wb") as log:
            self._process = subprocess.Popen(
                [
                    self.binary,
                    *FLAGS,
                    f"--user-data-dir={profile}",
                    "--remote-debugging-port=0",
                    "about:blank",
                ],
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        port = await self._devtools_port(profile / "DevToolsActivePort")
        self._session = aiohttp.ClientSession()
        for _ in range(100):
            async with self._session.get(f"http://127.0.0.1:{port}/json/list") as response:
                pages = [t for t in await response.json() if t.get("type") == "page"]
            if pages:
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("Chromium opened no page target")
        self._socket = await self._session.ws_connect(pages[0]["webSocketDebuggerUrl"], max_msg_size=0)
        await self.send("Page.enable")
        await self.send("Runtime.enable")
        return self

    async def _devtools_port(self, path: Path) -> int:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                raise AssertionError(f"Chromium exited at start with code {self._process.returncode}")
            if path.exists():
                first = path.read_text().split("\n", 1)[0].strip()
                if first.isdigit():
                    return int(first)
            await asyncio.sleep(0.05)
        raise AssertionError("Chromium did not open its DevTools port within 30 s")

    async def __aexit__(self, *exc: object) -> None:
        if self._socket is not None:
            await self._socket.close()
        if self._session is not None:
            await self._session.close()
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._profile.cleanup()

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        """One DevTools command; its result (events that arrive meanwhile are dropped)."""
        assert self._socket is not None
        ident = next(self._ids)
        await self._socket.send_str(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            message = await asyncio.wait_for(self._socket.receive(), 30)
            if message.type != aiohttp.WSMsgType.TEXT:
                raise AssertionError(f"DevTools connection closed: {message.type}")
            data = json.loads(message.data)
            if data.get("id") == ident:
                if "error" in data:
                    raise AssertionError(f"{method}: {data['error']}")
                result: dict[str, Any] = data["result"]
                return result

    async def evaluate(self, expression: str) -> Any:
        """The JSON value of a JavaScript expression in the page (promises awaited)."""
        answer = await self.send(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in answer:
            raise AssertionError(f"{expression}: {answer['exceptionDetails']}")
        return answer["result"].get("value")

    async def open(self, url: str) -> None:
        """Navigate and wait until the new document has loaded."""
        await self.send("Page.navigate", url=url)
        await self.wait_for(f"location.href === {json.dumps(url)} && document.readyState === 'complete'")

    async def wait_for(self, expression: str, timeout: float = 20) -> Any:
        """Poll until the expression is truthy; its value. Fails with the last value seen."""
        deadline = time.monotonic() + timeout
        value: Any = None
        while time.monotonic() < deadline:
            value = await self.evaluate(expression)
            if value:
                return value
            await asyncio.sleep(0.1)
        raise AssertionError(f"timed out waiting for {expression!r} (last value {value!r})")

    async def screenshot(self, path: Path) -> Path:
        """A full-page PNG."""
        metrics = await self.send("Page.getLayoutMetrics")
        size = metrics.get("cssContentSize") or metrics["contentSize"]
        shot = await self.send(
            "Page.captureScreenshot",
            format="png",
            captureBeyondViewport=True,
            clip={"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1},
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path
