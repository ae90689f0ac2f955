"""The fake model's HTTP server on 127.0.0.1, run on its own thread so that synchronous tests
can start a client process against it and read what it received."""

from __future__ import annotations

import asyncio
import threading
from types import TracebackType

from aiohttp import web

from tests.integration.fake_model.anthropic import AnthropicApi
from tests.integration.fake_model.script import Conversation, Exchange, Recorder, Script
from tests.integration.fake_model.wire import ApiFactory

__all__ = ["FakeModel"]


class FakeModel:
    """``with FakeModel(script, *apis) as model:`` serves the wire APIs ``apis`` at ``model.url``
    (``AnthropicApi``, ``ResponsesApi``, ``GeminiApi``; the Anthropic Messages API when none is
    named), all answered by ``script``.

    Every request is kept in ``model.recorder``; a path no API serves answers 404 in the first
    API's error shape (recorded too).
    """

    def __init__(self, script: Script, *apis: ApiFactory, host: str = "127.0.0.1") -> None:
        self.script = script
        self.apis = apis or (AnthropicApi,)
        self.host = host
        self.recorder = Recorder()
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def conversations(self) -> list[Conversation]:
        return self.recorder.conversations()

    def exchanges(self) -> list[Exchange]:
        return self.recorder.exchanges()

    def _app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        served = [api(self.script, self.recorder) for api in self.apis]
        for api in served:
            api.add_routes(app)

        async def unknown(request: web.Request) -> web.Response:
            body = await request.read()
            text = body.decode(errors="replace")
            self.recorder.add(Exchange("unknown", request.method, request.path, text, None, None, 404))
            return served[0].error(404, f"fake model: no route {request.method} {request.path}")

        app.router.add_route("*", "/{tail:.*}", unknown)
        return app

    def start(self) -> FakeModel:
        loop = asyncio.new_event_loop()
        ready = threading.Event()
        failure: list[BaseException] = []

        async def serve() -> None:
            runner = web.AppRunner(self._app(), access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, self.host, 0)
            await site.start()
            server = site._server  # the bound port of port 0
            assert isinstance(server, asyncio.Server)
            self.port = int(server.sockets[0].getsockname()[1])
            self._runner = runner

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(serve())
            except BaseException as exc:  # noqa: BLE001 - handed to start()
                failure.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_forever()

        self._loop = loop
        self._thread = threading.Thread(target=run, name="fake-model", daemon=True)
        self._thread.start()
        ready.wait(30)
        if failure:
            raise failure[0]
        return self

    def close(self) -> None:
        loop, runner, thread = self._loop, self._runner, self._thread
        if loop is None or thread is None:
            return
        if runner is not None:
            asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
        self._loop = self._thread = self._runner = None

    def __enter__(self) -> FakeModel:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
