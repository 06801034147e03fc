"""The pod's code-fetching init container, run for real (``python -m
taugrid.podhelper fetch-code``) against a real HTTP server serving a real snapshot."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from taugrid.workdir.snapshot import create_snapshot

TOKEN = "attempt-token-s3cr3t"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A snapshot of a small project behind a server that wants the token."""
    project = tmp_path / "project"
    (project / "pkg").mkdir(parents=True)
    (project / "train.py").write_text("print('train')\n")
    (project / "pkg" / "model.py").write_text("X = 1\n")
    info = create_snapshot(project, [], tmp_path / "store")
    body = info.path.read_bytes()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                self.send_error(401, "Unauthorized")
                return
            data = body if self.path.endswith(info.digest) else b"not the archive"
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/api/v1/snapshots/", info.digest
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def fetch(
    code_dir: Path, url: str, digest: str, token: str = TOKEN
) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "TAU_SNAPSHOT_URL": url,
        "TAU_SNAPSHOT_SHA256": digest,
        "TAU_SNAPSHOT_TOKEN": token,
        "TAU_CODE_DIR": str(code_dir),
    }
    return subprocess.run(
        [sys.executable, "-m", "taugrid.podhelper", "fetch-code"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_snapshot_lands_in_the_mounted_working_directory(
    tmp_path: Path, served: tuple[str, str]
) -> None:
    base, digest = served
    code = tmp_path / "workspace"  # an emptyDir's mount point: it exists and stays
    code.mkdir()
    (code / "stale.txt").write_text("from a restarted init container")
    out = fetch(code, base + digest, digest)
    assert out.returncode == 0, out.stderr
    assert (code / "train.py").read_text() == "print('train')\n"
    assert (code / "pkg" / "model.py").read_text() == "X = 1\n"
    assert not (code / "stale.txt").exists()
    assert sorted(p.name for p in code.iterdir()) == ["pkg", "train.py"]  # no staging left


def test_other_bytes_than_the_submitted_digest_are_refused(
    tmp_path: Path, served: tuple[str, str]
) -> None:
    base, digest = served
    code = tmp_path / "workspace"
    code.mkdir()
    out = fetch(code, base + "other", digest)
    assert out.returncode == 1
    assert f"not the submitted {digest}" in out.stderr
    assert list(code.iterdir()) == []  # nothing half-unpacked, no archive left


def test_a_refused_token_fails_at_once_and_is_never_printed(
    tmp_path: Path, served: tuple[str, str]
) -> None:
    base, digest = served
    code = tmp_path / "workspace"
    code.mkdir()
    out = fetch(code, base + digest, digest, token="wrong-token-value")
    assert out.returncode == 1
    assert "refused the code snapshot (401" in out.stderr
    assert "wrong-token-value" not in out.stderr + out.stdout
    assert list(code.iterdir()) == []
