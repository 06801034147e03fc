"""A bare ASGI server that makes the same commits as the API's submit and cancel: the
single-request baseline of ``bench.transitions``.

``python -m bench._bare_asgi --template T.json --db D.db --port-file P``: a plain ASGI
callable (no FastAPI, no Starlette routing, no pydantic, no auth, no request parsing)
served by the same uvicorn as the server (``uvicorn.Config(app, log_level="warning",
access_log=False, ...)``, one process, the socket bound beforehand, the same
``sys.setswitchinterval(0.0005)``), each request's commits run in a worker thread as
FastAPI runs a sync endpoint (``starlette.concurrency.run_in_threadpool``) and queued on
one lock as the server's ``write_transaction`` does:

* ``POST /api/v1/runs``: reads the body, then :meth:`Replayer.submit` (run row and its two
  events in one commit, the audit row in another), answers ``201 {"run": {"id": ...}}``;
* ``POST /api/v1/runs/{id}/cancel``: :meth:`Replayer.cancel` of that run (an UPDATE and
  its event in one commit, the audit row in another), answers ``200 {"id": ...}``.

So the difference between the API and this server is everything the API does besides
HTTP and those commits: routing, validation, auth, the service logic and its reads.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench._sqlite_replay import Replayer, Template


class BareApp:
    def __init__(self, replayer: Replayer) -> None:
        self.replayer = replayer
        self.lock = threading.Lock()

    def _submit(self) -> bytes:
        with self.lock:
            (rid,) = self.replayer.submit()
        return json.dumps({"run": {"id": rid, "state": "QUEUED"}}).encode()

    def _cancel(self, rid: str) -> bytes:
        with self.lock:
            self.replayer.cancel([rid])
        return json.dumps({"id": rid, "state": "CANCELLED"}).encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        from starlette.concurrency import run_in_threadpool

        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        more = True
        while more:  # the whole body, as any server must read it
            message = await receive()
            more = message.get("more_body", False)
        path, method = scope["path"], scope["method"]
        status, body = 404, b'{"detail": "not found"}'
        if method == "POST" and path == "/api/v1/runs":
            status, body = 201, await run_in_threadpool(self._submit)
        elif method == "POST" and path.startswith("/api/v1/runs/") and path.endswith("/cancel"):
            rid = path[len("/api/v1/runs/") : -len("/cancel")]
            status, body = 200, await run_in_threadpool(self._cancel, rid)
        elif method == "GET":
            status, body = 200, b'{"runs": []}'
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


class BareServer:
    """Starts ``python -m bench._bare_asgi`` for ``template`` in ``home``; stops it on exit."""

    def __init__(self, home: Path, template: Template) -> None:
        self.home = home
        self.template_path = home / "bare-template.json"
        self.template_path.write_text(template.to_json())
        self.db_path = home / "bare.db"
        self.port_file = home / "bare.port"
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    def __enter__(self) -> BareServer:
        from bench._common import REPO, clean_env

        args = [sys.executable, "-m", "bench._bare_asgi", "--template", str(self.template_path)]
        args += ["--db", str(self.db_path), "--port-file", str(self.port_file)]
        with (self.home / "bare.log").open("ab") as log:
            self.proc = subprocess.Popen(
                args,
                cwd=REPO,
                env=clean_env(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 30
        while not self.port_file.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.__exit__()
                raise RuntimeError(f"the bare ASGI server did not start: see {self.home}/bare.log")
            time.sleep(0.02)
        self.url = f"http://127.0.0.1:{int(self.port_file.read_text())}"
        return self

    def api(self) -> Any:
        from bench._common import Api

        return Api(self.url, "unused")

    def __exit__(self, *exc: object) -> None:
        from bench._common import terminate

        if self.proc is not None:
            terminate(self.proc)


def main() -> int:
    ap = argparse.ArgumentParser(prog="bare-asgi")
    ap.add_argument("--template", type=Path, required=True)
    ap.add_argument("--db", type=Path, required=True)
    ap.add_argument("--port-file", type=Path, required=True)
    args = ap.parse_args()
    import uvicorn

    sys.setswitchinterval(0.0005)  # as taugrid.server.__main__
    app = BareApp(Replayer(args.db, Template.from_json(args.template.read_text())))
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    tmp = args.port_file.with_suffix(".tmp")
    tmp.write_text(str(sock.getsockname()[1]))
    tmp.rename(args.port_file)
    config = uvicorn.Config(
        app, log_level="warning", access_log=False, timeout_graceful_shutdown=3, proxy_headers=False
    )
    uvicorn.Server(config).run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main())
