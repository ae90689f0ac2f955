"""The fleet dashboard over HTTP: one set of routes, served by faust's web server in a worker
and by aiohttp in the embedded runtime (``loopwatch demo --serve``, ``loopwatch run --serve``).

Routes (GET):

* ``/dashboard`` — the page (HTML, CSS and JS shipped in ``streams/web``; no CDN, no build);
  ``#/run/<run>`` opens a run.
* ``/fleet?minutes=N`` — the windowed fleet numbers (events/s, active runs, verdicts per
  agent / tool / detector, top looping tools, failing tools).
* ``/fleet/overview?minutes=N`` — the above plus the timeline, the verdict feed and the runs
  with verdicts: everything the fleet page draws, in one request.
* ``/fleet/run?id=RUN`` — one run: summary, its verdicts, its recent calls, results and verdicts.
* ``/fleet/chain?root=ROOT&limit=N`` — a delegation chain: its runs as a tree (depth first,
  at most ``limit`` rows, 200 by default; how many are hidden), each with its verdicts, and
  its chain alerts. The page opens it at ``#/chain/<root>``.
* ``/metrics``, ``/health`` — in the embedded runtime only (a worker serves its own): the same
  Prometheus series as a worker's, for what this process has processed.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import msgspec

from loopwatch.config.errors import LoopwatchError
from loopwatch.streams.fleet_view.run_activity import CHAIN_ROWS
from loopwatch.streams.fleet_view.view import FleetView
from loopwatch.streams.logs import quiet_malformed_requests

__all__ = [
    "PATHS",
    "Dashboard",
    "Response",
    "parse_address",
    "register_faust_pages",
    "serve_until_interrupted",
    "serving",
    "start_server",
]

WEB = Path(__file__).parent / "web"
PATHS = (
    "/dashboard",
    "/dashboard/app.js",
    "/dashboard/app.css",
    "/fleet",
    "/fleet/overview",
    "/fleet/run",
    "/fleet/chain",
)
_STATIC = {
    "/dashboard": ("index.html", "text/html; charset=utf-8"),
    "/dashboard/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/dashboard/app.css": ("app.css", "text/css; charset=utf-8"),
}
_JSON = "application/json"
MAX_MINUTES = 24 * 60
#: The most rows of a chain's tree one answer holds (``limit``); the view keeps 2,000 runs.
MAX_CHAIN_ROWS = 2000
#: How long a rendered /metrics is served again (Prometheus scrapes every 15 s or so).
METRICS_TTL_MS = 1000


@dataclass(frozen=True)
class Response:
    status: int
    content_type: str
    body: bytes


_PROMETHEUS = "text/plain; version=0.0.4; charset=utf-8"


def _number_within(raw: str, most: int) -> bool:
    """Whether ``raw`` is a whole number 1..``most`` (read only when short: ``int()`` refuses
    more than 4,300 digits with an exception)."""
    return raw.isascii() and raw.isdigit() and len(raw) <= len(str(most)) and 1 <= int(raw) <= most


def _json(status: int, value: Any) -> Response:
    return Response(status, _JSON, msgspec.json.encode(value))


class Dashboard:
    """Answers the dashboard's routes from a :class:`FleetView`."""

    def __init__(
        self, view: FleetView, clock: Callable[[], float] = time.time, serve_metrics: bool = False
    ) -> None:
        self.view = view
        # /metrics and /health of the embedded runtime (a worker serves its own)
        self.serve_metrics = serve_metrics
        self.clock = clock
        self.static = {path: (WEB / name).read_bytes() for path, (name, _) in _STATIC.items()}
        self._rendered: tuple[int, bytes] = (-METRICS_TTL_MS, b"")  # (when, the exposition)

    def _metrics(self, now_ms: int) -> bytes:
        """The exposition, rendered at most once per :data:`METRICS_TTL_MS`: any number of
        scrapers cost one rendering a second, whatever the number of runs."""
        when, text = self._rendered
        if now_ms - when >= METRICS_TTL_MS or now_ms < when:
            active, ended, size = self.view.gauges()
            text = self.view.metrics.render(active, ended, size, {}, self.view.alerts, now_ms).encode()
            self._rendered = (now_ms, text)
        return text

    def respond(self, path: str, query: Mapping[str, str]) -> Response:
        path = path.rstrip("/") or "/"
        if path in _STATIC:
            return Response(200, _STATIC[path][1], self.static[path])
        now_ms = int(self.clock() * 1000)
        if path == "/metrics" and self.serve_metrics:
            return Response(200, _PROMETHEUS, self._metrics(now_ms))
        if path == "/health" and self.serve_metrics:
            events = sum(self.view.metrics.events.values())
            return _json(200, {"status": "ok", "source": self.view.source, "events": events})
        if path == "/fleet/run":
            scope = query.get("id", "")
            if not scope:
                return _json(400, {"error": "query parameter id: the run id is required"})
            run = self.view.run(scope)
            if run is None:
                return _json(404, {"error": f"run {scope!r}: not seen in this view (or expired)"})
            return _json(200, {"as_of_ms": now_ms, "source": self.view.source, **run})
        if path == "/fleet/chain":
            root = query.get("root", "")
            if not root:
                return _json(400, {"error": "query parameter root: the chain's root run id is required"})
            raw = query.get("limit", str(CHAIN_ROWS))
            if not _number_within(raw, MAX_CHAIN_ROWS):
                problem = f"query parameter limit: {raw[:32]!r} is not 1..{MAX_CHAIN_ROWS}"
                return _json(400, {"error": problem})
            chain = self.view.chain(root, now_ms, int(raw))
            if chain is None:
                return _json(404, {"error": f"chain {root!r}: no run of it seen in this view (or expired)"})
            return _json(200, {"as_of_ms": now_ms, "source": self.view.source, **chain})
        if path in ("/fleet", "/fleet/overview"):
            raw = query.get("minutes", "5")
            if not _number_within(raw, MAX_MINUTES):
                return _json(400, {"error": f"query parameter minutes: {raw[:32]!r} is not 1..{MAX_MINUTES}"})
            if path == "/fleet":
                return _json(200, self.view.summary(now_ms, int(raw)))
            return _json(200, self.view.overview(now_ms, int(raw)))
        return _json(404, {"error": f"no route {path}"})


def register_faust_pages(app: Any, dashboard: Dashboard) -> None:
    """Serve the routes from a faust app's web server (faust binds page handlers to views)."""
    for path in PATHS:

        def page(route: str) -> Callable[..., Any]:
            async def handler(view: Any, request: Any) -> Any:
                answer = dashboard.respond(route, request.query)
                # the type goes in the headers: aiohttp refuses a charset in content_type
                headers = {"Content-Type": answer.content_type, "Cache-Control": "no-store"}
                return view.bytes(answer.body, status=answer.status, headers=headers)

            return handler

        app.page(path)(page(path))


async def start_server(dashboard: Dashboard, host: str, port: int) -> Any:
    """Serve the routes with aiohttp (``/`` redirects to the page); returns the runner to clean up."""
    from aiohttp import web

    async def handle(request: web.Request) -> web.StreamResponse:
        if request.path == "/":
            raise web.HTTPFound("/dashboard")
        answer = dashboard.respond(request.path, request.query)
        return web.Response(
            body=answer.body,
            status=answer.status,
            headers={"Content-Type": answer.content_type, "Cache-Control": "no-store"},
        )

    application = web.Application()
    application.router.add_get("/{tail:.*}", handle)
    quiet_malformed_requests()
    runner = web.AppRunner(application, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner


def parse_address(text: str, flag: str = "--serve", example: str = "127.0.0.1:6066") -> tuple[str, int]:
    """``PORT`` or ``HOST:PORT`` (port 0 picks a free port), given with ``flag`` (``example``:
    the address the error shows, the command's own default)."""
    host, _, port = text.rpartition(":")
    if not (port.isascii() and port.isdigit()) or int(port) > 65535:
        hint = ""
        if text.endswith((".jsonl", ".json", ".ndjson")) or os.path.isfile(text):
            hint = f"; {text} looks like an input file: name it before {flag}, whose address is optional"
        raise LoopwatchError(f"{flag} {text!r}: expected PORT or HOST:PORT, e.g. {example}{hint}")
    return host.strip("[]") or "127.0.0.1", int(port)


@asynccontextmanager
async def serving(view: FleetView, address: str, err: TextIO) -> AsyncIterator[str]:
    """The dashboard served while the block runs; yields its URL (also printed on ``err``)."""
    host, port = parse_address(address)
    try:
        runner = await start_server(Dashboard(view, serve_metrics=True), host, port)
    except OSError as exc:
        raise LoopwatchError(f"--serve {address}: cannot listen there: {exc.strerror or exc}") from exc
    bound = runner.addresses[0][1] if runner.addresses else port
    url = f"http://{host if ':' not in host else f'[{host}]'}:{bound}/dashboard"
    print(f"loopwatch: dashboard at {url}", file=err, flush=True)
    try:
        yield url
    finally:
        await runner.cleanup()


async def serve_until_interrupted(err: TextIO, what: str = "input done") -> None:
    """Keep the dashboard up until Ctrl-C or SIGTERM (after the input is done)."""
    print(f"loopwatch: {what}; the dashboard stays up until Ctrl-C", file=err, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
