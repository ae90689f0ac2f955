"""The benches' lean HTTP client (:mod:`tests.bench.http_load`): what it reads of a server's
answers, on a raw server on 127.0.0.1 that writes them as it is told (in pieces too)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from tests.bench.http_load import HttpError, LeanClient, run

#: the request's body -> the pieces of the answer to write ([]: close the connection; None: no answer)
Answer = Callable[[bytes], list[bytes] | None]


class _Server:
    def __init__(self, server: asyncio.Server, writers: list[asyncio.StreamWriter]) -> None:
        self._server, self._writers = server, writers

    async def close(self) -> None:
        for writer in self._writers:
            writer.close()
        self._server.close()
        await self._server.wait_closed()
        await asyncio.sleep(0.01)  # (the transports' closing callbacks)


async def _serve(answer: Answer, seen: list[bytes]) -> tuple[_Server, str]:
    writers: list[asyncio.StreamWriter] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                body = await reader.readexactly(length)
                seen.append(head + body)
                pieces = answer(body)
                if pieces is None:  # (no answer: the connection stays open)
                    continue
                if not pieces:  # (close under the request)
                    writer.close()
                    return
                for piece in pieces:
                    writer.write(piece)
                    await writer.drain()
                    await asyncio.sleep(0.001)
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return _Server(server, writers), f"http://127.0.0.1:{port}"


def _ok(body: bytes, status: bytes = b"200 OK") -> list[bytes]:
    whole = b"HTTP/1.1 " + status + b"\r\nContent-Type: application/json\r\nContent-Length: "
    whole += str(len(body)).encode() + b"\r\n\r\n" + body
    return [whole[i : i + 7] for i in range(0, len(whole), 7)]  # in pieces of 7 bytes


def test_answers_in_pieces_are_read_by_their_length_on_one_connection() -> None:
    seen: list[bytes] = []

    async def main() -> list[tuple[int, bytes]]:
        server, url = await _serve(lambda body: _ok(b'{"echo":' + body + b"}"), seen)
        client = LeanClient(url)
        try:
            return [await client.post("/v1/decide", b'{"n":%d}' % n) for n in range(3)]
        finally:
            await client.close()
            await server.close()

    answers = run(main)
    assert answers == [(200, b'{"echo":{"n":%d}}' % n) for n in range(3)]
    assert seen[0].startswith(b"POST /v1/decide HTTP/1.1\r\nHost: 127.0.0.1:")
    assert b"\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n" in seen[0]


def test_a_status_other_than_200_is_given_with_its_body() -> None:
    async def main() -> tuple[int, bytes]:
        server, url = await _serve(lambda body: _ok(b'{"error":"no"}', b"413 Payload Too Large"), [])
        client = LeanClient(url)
        try:
            return await client.post("/v1/events", b"{}")
        finally:
            await client.close()
            await server.close()

    assert run(main) == (413, b'{"error":"no"}')


def test_an_answer_without_a_length_and_a_connection_closed_under_a_request_are_errors() -> None:
    def chunked(body: bytes) -> list[bytes]:
        return [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"]

    async def ask(answer: Answer) -> tuple[int, bytes]:
        server, url = await _serve(answer, [])
        client = LeanClient(url)
        try:
            return await asyncio.wait_for(client.post("/", b"{}"), 5)
        finally:
            await client.close()
            await server.close()

    with pytest.raises(HttpError, match="without Content-Length"):
        run(lambda: ask(chunked))
    with pytest.raises(HttpError, match="closed under a request"):
        run(lambda: ask(lambda body: []))


def test_more_requests_at_once_than_connections_wait_for_one_and_all_are_answered() -> None:
    seen: list[bytes] = []

    async def main() -> tuple[list[tuple[int, bytes]], int]:
        server, url = await _serve(lambda body: _ok(body), seen)
        client = LeanClient(url, limit=3)
        try:
            answers = await asyncio.gather(*(client.post("/", b"%d" % n) for n in range(20)))
            return list(answers), len(client._all)
        finally:
            await client.close()
            await server.close()

    answers, connections = run(main)
    assert answers == [(200, b"%d" % n) for n in range(20)]
    assert connections == 3
    assert len(seen) == 20


def test_a_connection_closed_under_a_request_frees_its_slot_for_the_request_waiting() -> None:
    answers = iter([[], _ok(b"second")])  # the first request's connection closed, then an answer

    async def main() -> list[object]:
        server, url = await _serve(lambda body: next(answers), [])
        client = LeanClient(url, limit=1)
        try:
            both = client.post("/", b"1"), client.post("/", b"2")
            return list(await asyncio.wait_for(asyncio.gather(*both, return_exceptions=True), 5))
        finally:
            await client.close()
            await server.close()

    first, second = run(main)
    assert isinstance(first, HttpError)
    assert second == (200, b"second")


def test_a_cancelled_request_s_connection_is_not_lent_again() -> None:
    async def main() -> tuple[int, bytes]:
        server, url = await _serve(lambda body: None if body == b"slow" else _ok(body), [])
        client = LeanClient(url, limit=1)
        try:
            with pytest.raises(TimeoutError):  # its answer never comes: the request is given up
                await asyncio.wait_for(client.post("/", b"slow"), 0.2)
            return await asyncio.wait_for(client.post("/", b"next"), 5)
        finally:
            await client.close()
            await server.close()

    assert run(main) == (200, b"next")


def test_a_refused_connection_frees_its_slot() -> None:
    async def main() -> list[object]:
        probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = probe.sockets[0].getsockname()[1]
        probe.close()
        await probe.wait_closed()  # (nothing listens there now)
        client = LeanClient(f"http://127.0.0.1:{port}", limit=1)
        try:
            both = client.post("/", b"1"), client.post("/", b"2")
            return list(await asyncio.wait_for(asyncio.gather(*both, return_exceptions=True), 5))
        finally:
            await client.close()

    assert all(isinstance(outcome, OSError) for outcome in run(main))
