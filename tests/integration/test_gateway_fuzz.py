"""Fuzzing the gateway's door: property-based bodies, headers, paths and query strings against
a real ``loopwatch gateway`` process. Invariants: never a 5xx, never a hang (a normal decision
answers within a second after every case), memory bounded."""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.gateway_process import GatewayProcess, gateway_process
from tests.poison import POISON

TOKEN = "fuzz-token"
BUDGET = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    database=None,
)


class Gateway:
    def __init__(self, started: GatewayProcess) -> None:
        self.proc = started.proc
        parts = urlsplit(started.url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.checks = 0

    def request(
        self, method: str, path: str, body: bytes | None, headers: dict[str, str], timeout: float = 5
    ) -> tuple[int, bytes]:
        connection = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            connection.putrequest(method, path, skip_accept_encoding=True)
            for name, value in headers.items():
                connection.putheader(name, value.encode("latin-1"))
            if body is not None:
                connection.putheader("Content-Length", str(len(body)))
            connection.endheaders(body)
            answer = connection.getresponse()
            return answer.status, answer.read()
        finally:
            connection.close()

    def decide_works(self) -> None:
        self.checks += 1
        body = json.dumps({"run_id": f"probe-{self.checks}", "tool": "read", "params": {"n": self.checks}})
        headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
        started = time.monotonic()
        status, answer = self.request("POST", "/v1/decide", body.encode(), headers, timeout=1)
        assert status == 200, answer
        assert json.loads(answer)["decision"] == "allow"
        assert time.monotonic() - started < 1

    def rss_kib(self) -> int:
        with open(f"/proc/{self.proc.pid}/status") as status:
            line = next(line for line in status if line.startswith("VmRSS:"))
        return int(line.split()[1])


@pytest.fixture(scope="module")
def gateway() -> Iterator[Gateway]:
    with gateway_process(env={"LOOPWATCH_GATEWAY_TOKENS": TOKEN}) as started:
        yield Gateway(started)


def _deep(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=40),
    st.sampled_from(["\ud800", "x\udfff", "\u0663", "é" * 300, "a" * 600, ""]),
)
_json = st.recursive(
    _scalar,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
_fields = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(["tool_call", "tool_result", "run_end", "compaction_retry", "verdict", 7]),
        "event_id": _json,
        "run_id": _json,
        "session_id": _json,
        "agent_id": _json,
        "tool": _json,
        "params": _json | st.integers(min_value=60, max_value=1200).map(_deep),
        "result": _json,
        "error": _json,
        "ts": _json,
        "tool_call_id": _json,
        "usage": _json,
        "parent_run_id": _json,
        "depth": _json,
    },
)


def _encode(value: Any) -> bytes:
    return json.dumps(value).encode()  # ASCII: lone surrogates as \\ud800 escapes


_bodies = st.one_of(
    _fields.map(_encode),
    st.lists(_fields, max_size=3).map(_encode),
    st.lists(_fields, min_size=1, max_size=3).map(lambda items: b"\n".join(_encode(i) for i in items)),
    st.binary(max_size=200),
    st.sampled_from([maker("fuzz", 1) for maker in POISON.values()]),
    st.integers(min_value=500, max_value=5000).map(lambda n: b"[" * n + b"]" * n),
)
_header_text = st.text(
    st.characters(min_codepoint=32, max_codepoint=255, exclude_characters="\x7f"), max_size=30
)
_headers = st.fixed_dictionaries(
    {},
    optional={
        "Authorization": st.one_of(st.just(f"Bearer {TOKEN}"), _header_text.map(lambda t: f"Bearer {t}")),
        "Content-Type": st.sampled_from(
            ["application/json", "application/x-ndjson", "text/plain", "application/json; charset=utf-8", "x"]
        )
        | _header_text,
        "Origin": st.sampled_from(["https://evil.example", "null"]) | _header_text,
        "Host": st.sampled_from(["127.0.0.1", "localhost:1", "evil.example"]) | _header_text,
        "Accept": _header_text,
    },
)
_paths = st.sampled_from(
    [
        "/v1/events",
        "/v1/decide",
        "/v1/hooks/claude-code",
        "/v1/hooks/x",
        "/health",
        "/metrics",
        "/fleet",
        "/fleet/overview",
        "/fleet/run",
        "/fleet/chain",
        "/dashboard",
        "/nope",
    ]
)
_query = st.lists(
    st.tuples(st.sampled_from(["minutes", "id", "agent_id", "root", "limit", "x"]), st.text(max_size=12)),
    max_size=3,
).map(lambda pairs: "&".join(f"{k}={v.encode('utf-8', 'surrogatepass').hex()}" for k, v in pairs))


@BUDGET
@given(path=_paths, body=_bodies, headers=_headers, query=_query, method=st.sampled_from(["POST", "GET"]))
def test_no_request_gets_a_5xx_or_stops_detection(
    gateway: Gateway, path: str, body: bytes, headers: dict[str, str], query: str, method: str
) -> None:
    target = f"{path}?{query}" if query else path
    status, answer = gateway.request(method, target, body if method == "POST" else None, headers)
    assert status < 500, (target, headers, body[:200], answer[:300])
    gateway.decide_works()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture], database=None
)
@given(minutes=st.text(max_size=6), run=st.text(max_size=20))
def test_query_numbers_and_ids_of_any_characters(gateway: Gateway, minutes: str, run: str) -> None:
    from urllib.parse import quote

    auth = {"Authorization": f"Bearer {TOKEN}"}
    for target in (
        f"/fleet/overview?minutes={quote(minutes.encode('utf-8', 'surrogatepass'))}",
        f"/fleet/run?id={quote(run.encode('utf-8', 'surrogatepass'))}",
        f"/fleet/chain?root={quote(run.encode('utf-8', 'surrogatepass'))}"
        f"&limit={quote(minutes.encode('utf-8', 'surrogatepass'))}",
    ):
        status, answer = gateway.request("GET", target, None, auth)
        assert status < 500, (target, answer[:300])
    gateway.decide_works()


def test_memory_stays_bounded_after_the_fuzzing(gateway: Gateway) -> None:
    before = gateway.rss_kib()
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    for kind, maker in POISON.items():
        for index in range(20):
            status, _ = gateway.request("POST", "/v1/events", maker(kind, index), headers)
            assert status == 400
    gateway.decide_works()
    assert gateway.rss_kib() - before < 50_000  # refused input keeps nothing
