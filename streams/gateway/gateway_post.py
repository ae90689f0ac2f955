"""Asking a loopwatch gateway over HTTP from inside a runtime (command hooks, the Python
integrations): the standard library only, one JSON object in, one JSON object out.

Whatever the URL does, the caller gets an answer or one of two exceptions, within its
deadline: :class:`GatewayUnavailable` (refused, timed out, slower than the deadline, a wrong
token, a URL that is not a gateway's, a 5xx) or :class:`GatewayRefused` (400, 413 or 422: the
gateway is up and will not check this input). A socket timeout alone bounds each read, not the
request: a peer dripping a byte at a time would hold the agent for as long as it likes, so the
request runs on a thread of its own, whose socket is shut at the deadline.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import time
import urllib.parse
from typing import Any

__all__ = ["MAX_ANSWER_BYTES", "GatewayRefused", "GatewayUnavailable", "post_json"]

#: The most of an answer read (a decision is a few hundred bytes; another service's page is not).
MAX_ANSWER_BYTES = 1 << 20
#: Answers that mean "this input is not checked" (invalid, too large, unprocessable); any other
#: failure (401 and 403: a wrong token, 404: not a gateway, 408, 429, 5xx) is "unavailable".
_REFUSED = frozenset({400, 413, 422})


class GatewayUnavailable(Exception):
    """The gateway could not be asked: down, slow, or not a gateway."""


class GatewayRefused(Exception):
    """The gateway answered and refused the input (400, 413, 422)."""


#: what :func:`http_url_problem` says of a URL that is not http(s) or names no host
NOT_HTTP = "not an http:// or https:// URL"


def http_url_problem(url: str) -> str | None:
    """Why ``url`` cannot be posted to (None: it is an http:// or https:// URL with a host):
    :data:`NOT_HTTP`, or ``not a URL (why)`` (a port that is not a number)."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port  # (a port that is not a number raises here)
    except (ValueError, TypeError, AttributeError) as exc:
        return f"not a URL ({exc})"
    if parts.scheme not in ("http", "https") or not parts.hostname or port == 0:
        return NOT_HTTP
    return None


def post_json(url: str, path: str, body: Any, token: str | None, deadline: float) -> dict[str, Any]:
    """POST ``body`` (JSON-ready) to ``url + path`` and return the answer's object, by
    ``deadline`` (a :func:`time.monotonic` time)."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise GatewayUnavailable(f"gateway {url} too slow (no time left)")
    parts = urllib.parse.urlsplit(url + path)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise GatewayUnavailable(f"gateway {url}: {NOT_HTTP}")
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    try:
        connection = kind(parts.hostname, parts.port, timeout=left)
    except ValueError as exc:  # a port that is not a number
        raise GatewayUnavailable(f"gateway {url}: {exc}") from exc
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    data = json.dumps(body).encode()
    outcome: list[dict[str, Any] | Exception] = []
    worker = threading.Thread(
        target=_exchange,
        args=(connection, target, data, headers, url, outcome),
        name="loopwatch-gateway-post",
        daemon=True,
    )
    worker.start()
    worker.join(left)
    if not outcome:  # still waiting: its socket is shut, so the thread ends at once
        _shut(connection)
        raise GatewayUnavailable(f"gateway {url} slower than {left * 1000:.0f} ms")
    answer = outcome[0]
    if isinstance(answer, Exception):
        raise answer
    return answer


def _shut(connection: http.client.HTTPConnection) -> None:
    """Wake a thread blocked on the connection (closing alone does not, on Linux)."""
    sock = connection.sock
    if sock is not None:
        with contextlib.suppress(OSError):  # (already shut by the peer)
            sock.shutdown(socket.SHUT_RDWR)
    connection.close()


def _exchange(
    connection: http.client.HTTPConnection,
    target: str,
    data: bytes,
    headers: dict[str, str],
    url: str,
    outcome: list[Any],
) -> None:
    try:
        connection.request("POST", target, body=data, headers=headers)
        answer = connection.getresponse()
        raw = answer.read(MAX_ANSWER_BYTES)  # cut there: not JSON
        status = answer.status
    except (OSError, ValueError, http.client.HTTPException) as exc:
        # refused, timed out, cut short (IncompleteRead), not HTTP (BadStatusLine), shut
        outcome.append(GatewayUnavailable(f"gateway {url} unreachable: {type(exc).__name__}: {exc}"))
        return
    finally:
        connection.close()
    if status >= 300:
        detail = raw[:300].decode(errors="replace")
        kind = GatewayRefused if status in _REFUSED else GatewayUnavailable
        outcome.append(kind(f"gateway answered {status}: {detail}"))
        return
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        outcome.append(GatewayUnavailable(f"gateway {url} answered no JSON: {exc}"))
        return
    if not isinstance(value, dict):
        outcome.append(GatewayUnavailable(f"{url} answered JSON that is not a gateway's (not an object)"))
        return
    outcome.append(value)
