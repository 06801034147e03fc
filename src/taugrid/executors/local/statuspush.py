"""The supervisor's status push: one HTTP POST of JSON to the server, over a plain socket.

Stdlib only and cheap to import, like everything the supervisor imports (see its
docstring). ``http.client`` costs ~25 ms of imports per supervisor (it pulls in ``email``
and ``ssl``), more than the rest of the supervisor's start-up together, and every run
pays it; a push is one small request to the server, normally on loopback, so a socket
and a request written out by hand do (``urllib.parse`` too is left out: it imports
``ipaddress``, another 4 ms, and ``socket`` for the C module under it: making its enums
costs 2-4 ms). An ``https`` URL (a server behind TLS) still goes through ``http.client``.
"""

from __future__ import annotations

import json

try:
    import _socket as sockets  # CPython's C socket module, without socket.py's enums
except ImportError:  # pragma: no cover - another interpreter
    import socket as sockets  # type: ignore[no-redef]

MAX_ANSWER_BYTES = 64 * 1024


def post_json(url: str, token: str, payload: object, timeout: float) -> int:
    """POST ``payload`` to ``url`` with ``Authorization: Bearer TOKEN``; the answer's status.

    Waits for the answer, so the server has taken the request in when this returns.
    Raises ``OSError`` (unreachable, timeout) or ``ValueError`` (a URL, token or answer
    that makes no sense).
    """
    parts = split_url(url)
    if not token or not token.isascii() or not token.isprintable() or " " in token:
        raise ValueError("the token is not a printable ASCII word")
    body = json.dumps(payload).encode()
    if parts.scheme == "https":
        return _post_https(parts, token, body, timeout)
    head = (
        f"POST {parts.target} HTTP/1.1\r\n"
        f"Host: {parts.netloc}\r\n"
        f"Authorization: Bearer {token}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    sock = _connect(parts.host, parts.port or 80, timeout)
    try:
        sock.sendall(head.encode("ascii") + body)
        answer = b""
        while len(answer) < MAX_ANSWER_BYTES:
            piece = sock.recv(4096)
            if not piece:
                break
            answer += piece
    finally:
        sock.close()
    return _status_of(answer)


def _connect(host: str, port: int, timeout: float) -> sockets.socket:
    """A connected TCP socket to the first address of ``host`` that answers
    (``socket.create_connection``, which lives in socket.py)."""
    error: OSError = OSError(f"no address for {host}")
    for family, kind, proto, _, addr in sockets.getaddrinfo(host, port, 0, sockets.SOCK_STREAM):
        sock = sockets.socket(family, kind, proto)
        try:
            sock.settimeout(timeout)
            sock.connect(addr)
        except OSError as exc:
            sock.close()
            error = exc
            continue
        return sock
    raise error


class Url:
    """The parts of a URL a request needs (a plain class: a NamedTuple costs ms to make)."""

    __slots__ = ("host", "netloc", "port", "scheme", "target")

    def __init__(self, scheme: str, netloc: str, host: str, port: int | None, target: str):
        self.scheme = scheme
        self.netloc = netloc  # host[:port], as the Host header carries it
        self.host = host
        self.port = port
        self.target = target  # path and query


def split_url(url: str) -> Url:
    """``http(s)://host[:port][/path][?query]``, IPv6 literals in brackets; ValueError
    for anything else (user info is dropped)."""
    scheme, sep, rest = url.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in ("http", "https"):
        raise ValueError("not an http(s) URL")
    cut = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    netloc, target = rest[:cut].rpartition("@")[2], rest[cut:]
    if target.startswith("?") or not target:
        target = "/" + target
    if netloc.startswith("["):
        host, _, tail = netloc[1:].partition("]")
        port = tail[1:] if tail.startswith(":") else tail
    else:
        host, _, port = netloc.partition(":")
    if not host or (port and not port.isdigit()):
        raise ValueError("no host, or a port that is not a number")
    return Url(scheme, netloc, host, int(port) if port else None, target)


def _status_of(answer: bytes) -> int:
    """The status code of an HTTP/1.x answer's first line."""
    line = answer.split(b"\r\n", 1)[0].split()
    if len(line) < 2 or not line[0].startswith(b"HTTP/1.") or not line[1].isdigit():
        raise ValueError("not an HTTP answer")
    return int(line[1])


def _post_https(parts: Url, token: str, body: bytes, timeout: float) -> int:
    import http.client

    conn = http.client.HTTPSConnection(parts.host, parts.port or 443, timeout=timeout)
    try:
        conn.request(
            "POST",
            parts.target,
            body=body,
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()
