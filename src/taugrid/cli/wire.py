"""A minimal HTTP/1.1 client on a bare socket, for the CLI's start-up budget.

``http.client`` pulls in the email parser and ssl (~45 ms here, a third of ``tau status``);
the CLI needs one request per connection, Content-Length and chunked bodies, nothing
more. ssl is imported only for https URLs.
"""

from __future__ import annotations

import os
import select
import socket
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import BinaryIO


class ProtocolError(OSError):
    """The server's answer is not HTTP we understand."""


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    _body: BinaryIO
    _sock: socket.socket
    _method: str
    _done: bool = field(default=False)

    def iter_bytes(self) -> Iterator[bytes]:
        """The body as it arrives; chunked transfer encoding is decoded."""
        if self._method == "HEAD" or self.status in (204, 304):
            return
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            yield from self._chunks()
        elif "content-length" in self.headers:
            left = int(self.headers["content-length"])
            while left > 0:
                data = self._body.read1(min(left, 65536))  # type: ignore[attr-defined]
                if not data:
                    raise ProtocolError("connection closed before the body ended")
                left -= len(data)
                yield data
        else:
            while data := self._body.read1(65536):  # type: ignore[attr-defined]
                yield data

    def _chunks(self) -> Iterator[bytes]:
        while True:
            size_line = self._body.readline()
            if not size_line:
                raise ProtocolError("connection closed inside a chunked body")
            size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                self._body.readline()  # the blank line after the last chunk (no trailers)
                return
            left = size
            while left > 0:
                data = self._body.read1(left)  # type: ignore[attr-defined]
                if not data:
                    raise ProtocolError("connection closed inside a chunk")
                left -= len(data)
                yield data
            self._body.readline()

    def read(self) -> bytes:
        return b"".join(self.iter_bytes())

    def close(self) -> None:
        self._body.close()
        self._sock.close()


def request(
    host: str,
    port: int,
    method: str,
    target: str,
    *,
    headers: Mapping[str, str],
    body: bytes | BinaryIO | None = None,
    timeout: float | None = None,
    https: bool = False,
    progress: Callable[[int], None] | None = None,
) -> Response:
    """One request. A file ``body`` is sent from where it stands to its end, piece by
    piece (an upload is never read into memory); ``progress`` is told the bytes of it
    sent so far after each piece."""
    sock = socket.create_connection((host, port), timeout=timeout)
    try:
        if https:
            import ssl

            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
        lines = [f"{method} {target} HTTP/1.1", f"Host: {host}:{port}", "Connection: close"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        data = body if isinstance(body, bytes) else b""
        if body is not None and not isinstance(body, bytes):
            lines.append(f"Content-Length: {os.fstat(body.fileno()).st_size - body.tell()}")
        elif body is not None or method in ("POST", "PUT"):
            lines.append(f"Content-Length: {len(data)}")
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + data)
        if body is not None and not isinstance(body, bytes):
            _send_file(sock, body, progress)
        reader = sock.makefile("rb")
        status_line = reader.readline(65537)
        parts = status_line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/"):
            raise ProtocolError(f"not an HTTP response: {status_line[:80]!r}")
        hdrs: dict[str, str] = {}
        while (line := reader.readline(65537)) not in (b"\r\n", b"\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            hdrs[name.strip().lower()] = value.strip()
        return Response(int(parts[1]), hdrs, reader, sock, method)
    except BaseException:
        sock.close()
        raise


_PIECE = 256 * 1024


def _send_file(
    sock: socket.socket, f: BinaryIO, progress: Callable[[int], None] | None = None
) -> None:
    """Send the rest of ``f``; stop early when the server has answered already (it
    refuses an upload, e.g. over its size limit, without reading the rest): the answer
    is then read as usual instead of failing on a closed connection."""
    sent = 0
    try:
        while piece := f.read(_PIECE):
            if select.select([sock], [], [], 0)[0]:
                return
            sock.sendall(piece)
            sent += len(piece)
            if progress is not None:
                progress(sent)
    except (BrokenPipeError, ConnectionResetError):
        return  # the answer, if the server sent one, is still there to read
