"""The CLI's HTTP client against a real socket server sending hand-made answers."""

from __future__ import annotations

import socket
import threading

import pytest

from taugrid.cli import wire
from taugrid.cli.client import Client
from taugrid.errors import Ambiguous, AuthError, ServerUnreachable, SpecError


def _server(*answers: bytes) -> tuple[int, list[bytes], threading.Thread, socket.socket]:
    srv = socket.create_server(("127.0.0.1", 0))
    requests: list[bytes] = []
    queue = list(answers)

    def loop() -> None:
        for answer in queue:
            conn, _ = srv.accept()
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                head, _, rest = data.partition(b"\r\n\r\n")
                length = next(
                    (
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    ),
                    0,
                )
                while len(rest) < length:
                    rest += conn.recv(65536)
                requests.append(head + b"\r\n\r\n" + rest)
                conn.sendall(answer)

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    return srv.getsockname()[1], requests, t, srv


def _get(port: int, method: str = "GET", body: bytes | None = None) -> wire.Response:
    return wire.request("127.0.0.1", port, method, "/x", headers={"A": "b"}, body=body, timeout=5)


def test_content_length_body_and_request_shape() -> None:
    port, reqs, t, srv = _server(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
    resp = _get(port, "POST", b'{"k":1}')
    assert (resp.status, resp.read()) == (200, b"hello")
    resp.close()
    t.join()
    srv.close()
    assert reqs[0].startswith(b"POST /x HTTP/1.1\r\n")
    assert b"Content-Length: 7\r\n" in reqs[0] and reqs[0].endswith(b'{"k":1}')


def test_chunked_body_is_decoded_across_chunks() -> None:
    body = b"4\r\nwiki\r\n6;ext=1\r\npedia \r\nE\r\nin \r\n\r\nchunks.\r\n0\r\n\r\n"
    port, _, t, srv = _server(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + body)
    resp = _get(port)
    assert resp.read() == b"wikipedia in \r\n\r\nchunks."
    resp.close()
    t.join()
    srv.close()


def test_body_until_close_and_head_has_none() -> None:
    port, _, t, srv = _server(
        b"HTTP/1.1 200 OK\r\n\r\nto the end", b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n"
    )
    r1 = _get(port)
    assert r1.read() == b"to the end"
    r1.close()
    r2 = _get(port, "HEAD")
    assert r2.read() == b""
    r2.close()
    t.join()
    srv.close()


def test_truncated_chunked_body_raises() -> None:
    port, _, t, srv = _server(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nA\r\nabc")
    resp = _get(port)
    with pytest.raises(wire.ProtocolError):
        resp.read()
    resp.close()
    t.join()
    srv.close()


def _json_answer(status: int, body: bytes) -> bytes:
    return (
        f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def test_client_maps_error_codes_to_the_error_tree() -> None:
    port, reqs, t, srv = _server(
        _json_answer(409, b'{"error": {"code": "ambiguous", "message": "two runs"}}'),
        _json_answer(401, b'{"error": {"code": "unauthorized", "message": "bad token"}}'),
        _json_answer(
            422,
            b'{"error": {"code": "spec_invalid", "message": "m", "problems": '
            b'[{"file": "f", "line": 1, "col": 2, "field": "x", "message": "y"}]}}',
        ),
    )
    client = Client(f"http://127.0.0.1:{port}", "tok")
    with pytest.raises(Ambiguous, match="two runs"):
        client.get_run("r")
    with pytest.raises(AuthError):
        client.get_run("r")
    with pytest.raises(SpecError) as exc:
        client.get_run("r")
    assert str(exc.value.problems[0]) == "f:1:2: x: y"
    t.join()
    srv.close()
    assert b"Authorization: Bearer tok\r\n" in reqs[0]


def test_refused_connection_is_server_unreachable() -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises(ServerUnreachable, match="cannot reach"):
        Client(f"http://127.0.0.1:{port}", None).get_run("x")
