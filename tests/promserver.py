"""A real Prometheus (Debian's ``prometheus``; mandatory in CI) on loopback for a test: the
config text given, its TSDB and log in the test's directory; skips with the reason where
the binary is missing (a module of its own: tests/ is on sys.path through its conftest)."""

from __future__ import annotations

import shutil
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from servicecheck import require_service


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def prometheus(config: str, workdir: Path) -> Iterator[str]:
    """Prometheus running ``config``; yields its URL, stops it on the way out."""
    binary = shutil.which("prometheus")
    require_service(binary is not None, "prometheus (Debian package prometheus) is not installed")
    assert binary is not None
    path = workdir / "prometheus.yml"
    path.write_text(config)
    port = free_port()
    with (workdir / "prometheus.log").open("w") as log:
        proc = subprocess.Popen(
            [
                binary,
                f"--config.file={path}",
                f"--storage.tsdb.path={workdir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            proc.terminate()
            proc.wait(timeout=30)
