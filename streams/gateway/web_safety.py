"""What the gateway checks of every request before it reads a body (web safety by default).

* **Host**: a request's ``Host`` must name the address the gateway listens on, a loopback
  name, or one of ``--allowed-hosts`` (a DNS-rebinding page gets 421). A gateway listening on
  every address (``0.0.0.0``, ``::``) checks the host only when ``--allowed-hosts`` is given.
* **Origin**: a request that carries an ``Origin`` (every cross-site request a browser makes
  does) must come from the gateway's own origin or one of ``--allowed-origins`` (403).
* **Content type**: a POST must say ``application/json`` or ``application/x-ndjson`` (415):
  the types a web page can send without asking first (``text/plain``, forms) are refused.
  ``POST /v1/traces`` (OTLP/HTTP) may also say ``application/x-protobuf`` (:data:`OTLP_TYPES`):
  a browser asks before sending that type too (it is not a CORS-safelisted one).
* **Token**: with tokens configured, every route but ``/health`` and the dashboard's static
  files needs ``Authorization: Bearer <token>`` (401); tokens are compared as UTF-8 bytes in
  constant time, whatever characters the header holds.
* Listening beyond loopback without a token is refused at startup unless
  ``--insecure-no-auth`` is given.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = [
    "JSON_TYPES",
    "OTLP_TYPES",
    "Refusal",
    "WebSafety",
    "is_loopback",
    "is_wildcard",
]

#: The content types a POST may carry (a ``+json`` suffix is accepted too).
JSON_TYPES = frozenset(
    {"application/json", "application/x-ndjson", "application/jsonl", "application/ndjson"}
)
#: ``POST /v1/traces`` also takes OTLP protobuf (the path -> the extra types it takes).
OTLP_TYPES = {"/v1/traces": frozenset({"application/x-protobuf"})}
_LOOPBACK_NAMES = frozenset({"localhost", "localhost.", "ip6-localhost"})
#: Routes served without a token: the page itself holds no data (its fetches send the token).
OPEN_PATHS = frozenset(
    {"/", "/health", "/dashboard", "/dashboard/", "/dashboard/app.js", "/dashboard/app.css"}
)


@dataclass(frozen=True)
class Refusal:
    status: int
    reason: str


def is_wildcard(host: str) -> bool:
    return host in ("", "0.0.0.0", "::", "*")


def is_loopback(host: str) -> bool:
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _host_name(header: str) -> str:
    """The host of a ``Host`` header without its port (``[::1]:80`` -> ``::1``)."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def _as_bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


@dataclass(frozen=True)
class WebSafety:
    """The checks of one gateway: its listen address, tokens and the extra hosts and origins."""

    listen_host: str = "127.0.0.1"
    port: int = 0
    tokens: frozenset[str] = frozenset()
    allowed_hosts: frozenset[str] = frozenset()
    allowed_origins: frozenset[str] = frozenset()
    _token_bytes: tuple[bytes, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_token_bytes", tuple(_as_bytes(token) for token in self.tokens))

    @classmethod
    def of(
        cls,
        listen_host: str,
        port: int,
        tokens: Iterable[str],
        hosts: Iterable[str] = (),
        origins: Iterable[str] = (),
    ) -> WebSafety:
        return cls(
            listen_host.strip("[]").lower(),
            port,
            frozenset(tokens),
            frozenset(h.strip().lower().strip("[]") for h in hosts if h.strip()),
            frozenset(o.strip().rstrip("/").lower() for o in origins if o.strip()),
        )

    def with_port(self, port: int) -> WebSafety:
        return WebSafety(self.listen_host, port, self.tokens, self.allowed_hosts, self.allowed_origins)

    def host_allowed(self, host_header: str | None) -> bool:
        if is_wildcard(self.listen_host) and not self.allowed_hosts:
            return True
        if not host_header:
            return False  # HTTP/1.1 requires one; a browser always sends one
        name = _host_name(host_header)
        return name == self.listen_host or is_loopback(name) or name in self.allowed_hosts

    def origin_allowed(self, origin: str | None, host_header: str | None) -> bool:
        if origin is None:
            return True  # not a browser's cross-site request
        origin = origin.strip().rstrip("/").lower()
        if origin in self.allowed_origins:
            return True
        if not host_header:
            return False
        # the gateway's own pages (the dashboard) are same-origin: scheme://<the Host asked for>
        host = host_header.strip().lower()
        return origin in (f"http://{host}", f"https://{host}")

    def token_ok(self, authorization: str | None) -> bool:
        if not self._token_bytes:
            return True
        text = (authorization or "").strip()
        scheme, _, credentials = text.partition(" ")
        given = _as_bytes(credentials.strip() if scheme.lower() == "bearer" else text)  # (any case)
        ok = False
        for token in self._token_bytes:  # every token compared: the time says nothing
            ok |= hmac.compare_digest(given, token)
        return ok

    def check(
        self,
        method: str,
        path: str,
        *,
        host: str | None = None,
        origin: str | None = None,
        authorization: str | None = None,
        content_type: str | None = None,
    ) -> Refusal | None:
        """The refusal of a request (None: it may go on)."""
        if not self.host_allowed(host):
            return Refusal(421, f"host {host!r} is not served here (--allowed-hosts adds names)")
        if not self.origin_allowed(origin, host):
            return Refusal(403, f"origin {origin!r} is not allowed (--allowed-origins adds origins)")
        if path not in OPEN_PATHS and not self.token_ok(authorization):
            if not (authorization or "").strip():
                return Refusal(401, "a bearer token is required (Authorization: Bearer <token>)")
            return Refusal(401, "the bearer token is not one of the gateway's (LOOPWATCH_GATEWAY_TOKENS)")
        if method == "POST":
            media = (content_type or "").split(";", 1)[0].strip().lower()
            if (
                media not in JSON_TYPES
                and not media.endswith("+json")
                and media not in OTLP_TYPES.get(path.rstrip("/"), frozenset())
            ):
                return Refusal(
                    415,
                    f"content type {media or 'none'!r}: send Content-Type: application/json "
                    "(or application/x-ndjson)",
                )
        return None
