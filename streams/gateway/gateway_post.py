"""Asking a loopwatch gateway over HTTP from inside a runtime (command hooks, the Python
integrations): the standard library only, one JSON object in, one JSON object out.

Whatever the URL does, the caller gets an answer or one of three exceptions, within its
deadline: :class:`GatewayUnavailable` (refused, timed out, slower than the deadline, a wrong
token, a URL that is not a gateway's, a 5xx), :class:`GatewayRefused` (400, 413 or 422: the
gateway is up and will not check this input) or :class:`InputNotSent`, a ``GatewayRefused``
(an input nested too deeply to be written as JSON, which no gateway would check either).

One request, ``Connection: close``, over a socket of its own (``http.client`` brings the email
parser and ``ssl`` with it: most of a command hook's start). A socket timeout alone bounds each
read, not the request: a peer dripping a byte at a time would hold the agent for as long as it
likes, so every step (connecting, the TLS handshake, sending, each read) waits at most for what
is left of the deadline, and a host name (not an IP address) is looked up on a thread of its
own, given up at the deadline (the lookup itself cannot be timed out).
"""

from __future__ import annotations

import _socket  # (socket.py makes its enums at import: milliseconds of a hook's start)
import json
import time

TYPE_CHECKING = False  # (typing itself is not imported for it: the command hook starts quickly)
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "MAX_ANSWER_BYTES",
    "NOT_HTTP",
    "GatewayRefused",
    "GatewayUnavailable",
    "InputNotSent",
    "http_url_problem",
    "post_json",
]

#: The most of an answer read (a decision is a few hundred bytes; another service's page is not).
MAX_ANSWER_BYTES = 1 << 20
#: The most of an answer's status line and headers read.
_MAX_HEAD_BYTES = 64 << 10
#: Answers that mean "this input is not checked" (invalid, too large, unprocessable); any other
#: failure (401 and 403: a wrong token, 404: not a gateway, 408, 429, 5xx) is "unavailable".
_REFUSED = frozenset({400, 413, 422})


class GatewayUnavailable(Exception):
    """The gateway could not be asked: down, slow, or not a gateway."""


class GatewayRefused(Exception):
    """The gateway answered and refused the input (400, 413, 422)."""


class InputNotSent(GatewayRefused):
    """The input nests too deeply to be written as JSON: not sent, and not checked (a gateway
    refuses anything that nests more than 64 levels)."""


#: what :func:`http_url_problem` says of a URL that is not http(s) or names no host
NOT_HTTP = "not an http:// or https:// URL"


def http_url_problem(url: str) -> str | None:
    """Why ``url`` cannot be posted to (None: it is an http:// or https:// URL with a host):
    :data:`NOT_HTTP`, or ``not a URL (why)`` (a port that is not a number)."""
    import urllib.parse

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
    scheme, host, port, target = _split(url + path)
    if isinstance(port, ValueError):  # a port that is not a number, a bracketed host not IPv6
        raise GatewayUnavailable(f"gateway {url}: {port}") from port
    if scheme not in ("http", "https") or not host:
        raise GatewayUnavailable(f"gateway {url}: {NOT_HTTP}")
    if port is None:
        port = 443 if scheme == "https" else 80
    try:
        data = json.dumps(body).encode()
    except RecursionError:
        raise InputNotSent("the input nests too deeply to be sent as JSON") from None
    try:
        request = _request(scheme, host, port, target, data, token)
    except (ValueError, UnicodeError) as exc:  # a control character in the path or the token
        raise GatewayUnavailable(f"gateway {url} unreachable: {type(exc).__name__}: {exc}") from exc
    try:
        status, raw = _exchange(scheme, host, port, request, deadline)
    except TimeoutError as exc:
        raise GatewayUnavailable(f"gateway {url} slower than {left * 1000:.0f} ms") from exc
    except (OSError, ValueError) as exc:  # refused, cut short, not HTTP, shut
        raise GatewayUnavailable(f"gateway {url} unreachable: {type(exc).__name__}: {exc}") from exc
    if status >= 300:
        detail = raw[:300].decode(errors="replace")
        kind = GatewayRefused if status in _REFUSED else GatewayUnavailable
        raise kind(f"gateway answered {status}: {detail}")
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise GatewayUnavailable(f"gateway {url} answered no JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise GatewayUnavailable(f"{url} answered JSON that is not a gateway's (not an object)")
    return value


def _split(url: str) -> tuple[str, str, int | ValueError | None, str]:
    """``url``'s scheme, host name (lower case, no brackets), port (None: not given; a
    ValueError: not a port) and request target (path and query), as ``urllib.parse.urlsplit``
    reads them: a plain ``http(s)://host[:port][/path][?query]`` here (the library's import is
    a good part of a hook's start), any other form by urlsplit itself."""
    scheme, separator, rest = url.partition("://")
    authority, slash, path = rest.partition("/")
    name, colon, port_text = authority.partition(":")
    plain = (
        separator
        and scheme in ("http", "https")
        and name
        and url.isascii()
        and url.isprintable()
        and not any(c in url for c in " #\\")
        and not any(c in authority for c in "@[]?%")
        and (not colon or (port_text.isdigit() and int(port_text) <= 65535))
    )
    if plain:
        path, _, query = (slash + path).partition("?")
        port = int(port_text) if colon else None
        return scheme, name.lower(), port, (path or "/") + (f"?{query}" if query else "")
    import urllib.parse

    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError as exc:  # a bracketed host that is no IPv6 address
        return "", "", exc, ""
    try:
        given: int | ValueError | None = parts.port
    except ValueError as exc:
        given = exc
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return parts.scheme, parts.hostname or "", given, target


def _request(scheme: str, host: str, port: int, target: str, data: bytes, token: str | None) -> bytes:
    """The request's bytes: what ``http.client`` sent, and ``Connection: close`` (it refused
    the same URLs and tokens: a control character, a space, a non-ASCII path)."""
    if any(c <= " " or c == "\x7f" for c in target):
        raise ValueError(f"URL can't contain control characters or spaces: {target!r}")
    if ":" in host:  # IPv6
        host = f"[{host}]"
    if port != (443 if scheme == "https" else 80):
        host = f"{host}:{port}"
    try:
        host_bytes = host.encode("ascii")
    except UnicodeEncodeError:
        host_bytes = host.encode("idna")
    head = (
        f"POST {target} HTTP/1.1\r\n".encode("ascii")
        + b"Host: "
        + host_bytes
        + b"\r\nAccept-Encoding: identity\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(data)}\r\nConnection: close\r\n".encode("ascii")
    )
    if token:
        if "\r" in token or "\n" in token:
            raise ValueError("Invalid header value: the token holds a line break")
        head += f"Authorization: Bearer {token}\r\n".encode("latin-1")
    return head + b"\r\n" + data


def _exchange(scheme: str, host: str, port: int, request: bytes, deadline: float) -> tuple[int, bytes]:
    """Send ``request``; the answer's status and body (at most :data:`MAX_ANSWER_BYTES`)."""
    sock = _connected(host, port, deadline, scheme == "https")
    try:
        if scheme == "https":
            import ssl

            context = ssl.create_default_context()
            context.set_alpn_protocols(["http/1.1"])
            _wait(sock, deadline)
            sock = context.wrap_socket(sock, server_hostname=host)  # type: ignore[arg-type]
        _wait(sock, deadline)
        try:
            sock.sendall(request)
        except (BrokenPipeError, ConnectionResetError):
            try:  # the gateway may have answered before it read the whole body (413)
                return _answer(sock, deadline)
            except OSError:
                pass
            raise
        return _answer(sock, deadline)
    finally:
        sock.close()


def _connected(host: str, port: int, deadline: float, wrappable: bool) -> _socket.socket:
    """A socket connected to the first of the host's addresses that takes the connection (as
    ``socket.create_connection``); ``wrappable``: a ``socket.socket``, which ssl can wrap."""
    if wrappable:
        import socket

        new: type[_socket.socket] = socket.socket
    else:
        new = _socket.socket
    failure: OSError | None = None
    for family, address in _addresses(host, port, deadline):
        sock = new(family, _socket.SOCK_STREAM)
        try:
            _wait(sock, deadline)
            sock.connect(address)
        except OSError as exc:
            sock.close()
            if isinstance(exc, TimeoutError):
                raise
            failure = exc
            continue
        return sock
    raise failure if failure is not None else OSError(f"no address for {host}")


def _wait(sock: _socket.socket, deadline: float) -> None:
    """The next step on ``sock`` waits at most for what is left of the deadline."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("no time left")
    sock.settimeout(left)


def _addresses(host: str, port: int, deadline: float) -> list[tuple[int, tuple[Any, ...]]]:
    """The families and addresses to try: an IP address at once, a host name's looked up on a
    thread given up at the deadline."""
    for family in (_socket.AF_INET, _socket.AF_INET6):
        try:
            _socket.inet_pton(family, host)
        except OSError:
            continue
        return [(family, (host, port) if family == _socket.AF_INET else (host, port, 0, 0))]
    import threading

    found: list[Any] = []

    def look_up() -> None:
        try:
            found.append(_socket.getaddrinfo(host, port, 0, _socket.SOCK_STREAM))
        except OSError as exc:
            found.append(exc)

    lookup = threading.Thread(target=look_up, name="loopwatch-gateway-lookup", daemon=True)
    lookup.start()
    lookup.join(max(deadline - time.monotonic(), 0))
    if not found:
        raise TimeoutError(f"looking up {host}")
    if isinstance(found[0], OSError):
        raise found[0]
    return [(family, address) for family, _, _, _, address in found[0]]


def _answer(sock: _socket.socket, deadline: float) -> tuple[int, bytes]:
    """Read the answer: status line, headers, then a body of ``Content-Length`` bytes, chunks,
    or up to the end of the connection; interim (1xx) answers are skipped."""
    status, headers, buffer = _head(sock, b"", deadline)
    while 100 <= status < 200:  # (101 too: no upgrade was asked for)
        status, headers, buffer = _head(sock, buffer, deadline)
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return status, _chunked(sock, buffer, deadline)
    length = headers.get("content-length")
    if length is not None:
        if not length.isdigit():
            raise ValueError(f"a Content-Length that is not a number: {length[:40]!r}")
        wanted = min(int(length), MAX_ANSWER_BYTES)
        while len(buffer) < wanted:
            chunk = _read(sock, deadline)
            if not chunk:
                break  # cut short: what came is read (as http.client did), JSON or not
            buffer += chunk
        return status, buffer[:wanted]
    while len(buffer) < MAX_ANSWER_BYTES:  # up to the end of the connection
        chunk = _read(sock, deadline)
        if not chunk:
            break
        buffer += chunk
    return status, buffer[:MAX_ANSWER_BYTES]


def _head(sock: _socket.socket, buffer: bytes, deadline: float) -> tuple[int, dict[str, str], bytes]:
    """The status and headers (names in lower case) of the answer starting ``buffer``, and
    what was read after them."""
    end = buffer.find(b"\r\n\r\n")
    while end < 0:
        if len(buffer) > _MAX_HEAD_BYTES:
            raise ValueError("the answer's headers are too long")
        chunk = _read(sock, deadline)
        if not chunk:
            raise ConnectionError("cut short in the headers" if buffer else "closed without an answer")
        buffer += chunk
        end = buffer.find(b"\r\n\r\n")
    status_line, *lines = buffer[:end].decode("latin-1").split("\r\n")
    version, _, rest = status_line.partition(" ")
    code = rest[:3]
    if not version.startswith("HTTP/") or len(code) != 3 or not code.isdigit():
        raise ValueError(f"not an HTTP answer: {status_line[:100]!r}")
    headers: dict[str, str] = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(code), headers, buffer[end + 4 :]


def _chunked(sock: _socket.socket, buffer: bytes, deadline: float) -> bytes:
    body = b""
    while len(body) < MAX_ANSWER_BYTES:
        end = buffer.find(b"\r\n")
        while end < 0:
            if len(buffer) > 1024:
                raise ValueError("a chunk size line too long")
            buffer += _more(sock, deadline)
            end = buffer.find(b"\r\n")
        size_text = buffer[:end].split(b";")[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise ValueError(f"not a chunk size: {size_text[:40]!r}") from None
        if size == 0:
            return body
        buffer = buffer[end + 2 :]
        while len(buffer) < size + 2:
            buffer += _more(sock, deadline)
        body += buffer[:size]
        buffer = buffer[size + 2 :]
    return body[:MAX_ANSWER_BYTES]


def _more(sock: _socket.socket, deadline: float) -> bytes:
    chunk = _read(sock, deadline)
    if not chunk:
        raise ConnectionError("cut short in a chunk")
    return chunk


def _read(sock: _socket.socket, deadline: float) -> bytes:
    _wait(sock, deadline)
    return sock.recv(65536)
