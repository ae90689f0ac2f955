"""Asking a loopwatch gateway over HTTP from inside a runtime (command hooks, the Python
integrations): the standard library only, one JSON object in, one JSON object out.

Whatever the URL does, the caller gets an answer or one of two exceptions, within its
deadline: :class:`GatewayUnavailable` (refused, timed out, slower than the deadline, a 5xx,
an answer that is not a gateway's JSON object) or :class:`GatewayRefused` (a 4xx: the gateway
is up and will not check this input). A socket timeout alone bounds each read, not the
request: a peer dripping a byte at a time would hold the agent for as long as it likes, so the
request runs on a daemon thread that is left behind at the deadline.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.error
import urllib.request
from typing import Any

__all__ = ["MAX_ANSWER_BYTES", "GatewayRefused", "GatewayUnavailable", "post_json"]

#: The most of an answer read (a decision is a few hundred bytes; another service's page is not).
MAX_ANSWER_BYTES = 1 << 20
#: Answers that mean "down or slow", not "refused": timed out, too many requests.
_BUSY = frozenset({408, 429})


class GatewayUnavailable(Exception):
    """The gateway could not be asked: down, slow, or not a gateway."""


class GatewayRefused(Exception):
    """The gateway answered and refused the input (a 4xx other than 408 and 429)."""


def post_json(url: str, path: str, body: Any, token: str | None, deadline: float) -> dict[str, Any]:
    """POST ``body`` (JSON-ready) to ``url + path`` and return the answer's object, by
    ``deadline`` (a :func:`time.monotonic` time)."""
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    left = deadline - time.monotonic()
    if left <= 0:
        raise GatewayUnavailable(f"gateway {url} too slow (no time left)")
    request = urllib.request.Request(url + path, data=json.dumps(body).encode(), headers=headers)
    outcome: list[dict[str, Any] | Exception] = []
    worker = threading.Thread(target=_exchange, args=(request, url, left, outcome), daemon=True)
    worker.start()
    worker.join(left)
    if not outcome:  # still waiting: the thread is left behind (a daemon: it dies with the process)
        raise GatewayUnavailable(f"gateway {url} slower than {left * 1000:.0f} ms")
    answer = outcome[0]
    if isinstance(answer, Exception):
        raise answer
    return answer


def _exchange(request: urllib.request.Request, url: str, timeout_s: float, outcome: list[Any]) -> None:
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:
            value = json.loads(answer.read(MAX_ANSWER_BYTES))  # cut there: not JSON
    except urllib.error.HTTPError as exc:
        try:
            detail = exc.read(300).decode(errors="replace")
        except (OSError, http.client.HTTPException):
            detail = ""
        kind = GatewayUnavailable if exc.code >= 500 or exc.code in _BUSY else GatewayRefused
        outcome.append(kind(f"gateway answered {exc.code}: {detail}"))
        return
    except (OSError, ValueError, RecursionError, http.client.HTTPException) as exc:
        # refused, timed out, not JSON, cut short (IncompleteRead), not HTTP (BadStatusLine)
        outcome.append(GatewayUnavailable(f"gateway {url} unreachable: {type(exc).__name__}: {exc}"))
        return
    if not isinstance(value, dict):
        outcome.append(GatewayUnavailable(f"{url} answered JSON that is not a gateway's (not an object)"))
        return
    outcome.append(value)
