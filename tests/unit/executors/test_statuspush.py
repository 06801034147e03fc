"""The supervisor's status push over a plain socket, against real HTTP servers."""

from __future__ import annotations

import http.server
import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from taugrid.executors.local.statuspush import post_json, split_url


class _Recorder(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # as uvicorn answers: keep-alive unless told to close
    received: list[dict[str, Any]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append(
            {"path": self.path, "headers": dict(self.headers), "body": json.loads(body)}
        )
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[http.server.HTTPServer]:
    _Recorder.received = []
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join()


def test_posts_json_with_the_token_and_waits_for_the_answer(
    server: http.server.HTTPServer,
) -> None:
    port = server.server_address[1]
    url = f"http://127.0.0.1:{port}/api/v1/internal/attempt-status?x=1"
    status = post_json(url, "tau_abc", {"attempt_dir": "/a", "status": {"phase": "running"}}, 2)
    assert status == 204
    # The answer came back, so the request was taken in before post_json returned.
    (got,) = _Recorder.received
    assert got["path"] == "/api/v1/internal/attempt-status?x=1"
    assert got["headers"]["Authorization"] == "Bearer tau_abc"
    assert got["headers"]["Content-Type"] == "application/json"
    assert got["headers"]["Host"] == f"127.0.0.1:{port}"
    assert got["body"] == {"attempt_dir": "/a", "status": {"phase": "running"}}


def test_nobody_listening_is_an_os_error() -> None:
    with socket.socket() as s:  # a port that was free a moment ago
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(OSError):
        post_json(f"http://127.0.0.1:{port}/x", "t", {}, 2)


def test_an_answer_that_is_not_http_is_refused() -> None:
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()

        def answer_garbage() -> None:
            conn, _ = srv.accept()
            with conn:
                conn.recv(65536)
                conn.sendall(b"SSH-2.0-OpenSSH\r\n")

        thread = threading.Thread(target=answer_garbage)
        thread.start()
        with pytest.raises(ValueError, match="not an HTTP answer"):
            post_json(f"http://127.0.0.1:{srv.getsockname()[1]}/x", "t", {}, 2)
        thread.join()


@pytest.mark.parametrize("token", ["a b", "a\r\nX-Injected: 1", "\u00e9t\u00e9", ""])
def test_a_token_that_could_break_the_request_is_refused(token: str) -> None:
    with pytest.raises(ValueError, match="token"):
        post_json("http://127.0.0.1:9/x", token, {}, 1)


@pytest.mark.parametrize(
    ("url", "parts"),
    [
        ("http://10.0.0.1:8000/a/b?c=1", ("http", "10.0.0.1:8000", "10.0.0.1", 8000, "/a/b?c=1")),
        ("http://localhost", ("http", "localhost", "localhost", None, "/")),
        ("HTTP://h:1?q", ("http", "h:1", "h", 1, "/?q")),
        ("https://u:p@h.example/x", ("https", "h.example", "h.example", None, "/x")),
        ("http://[::1]:5000/p", ("http", "[::1]:5000", "::1", 5000, "/p")),
    ],
)
def test_split_url(url: str, parts: tuple[object, ...]) -> None:
    u = split_url(url)
    assert (u.scheme, u.netloc, u.host, u.port, u.target) == parts


@pytest.mark.parametrize("url", ["ftp://h/x", "h:80/x", "http://:80/x", "http://h:port/x"])
def test_split_url_refuses_what_is_not_an_http_url(url: str) -> None:
    with pytest.raises(ValueError):
        split_url(url)


def test_importing_it_stays_cheap() -> None:
    """The point of the module: the supervisor must not pay http.client's imports."""
    code = (
        "import sys; import taugrid.executors.local.statuspush; "
        "print(sorted(m for m in ('http.client', 'ssl', 'email', 'urllib.parse', 'socket')"
        " if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
