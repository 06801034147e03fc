"""A cluster pod's code fetch against a real server: the snapshot goes to the bearer of
its attempt's code token and to nobody else, and the real init-container helper
(``python -m taugrid.podhelper fetch-code``) unpacks it from there."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
from tauproc import Tau

from taugrid.domain.code_tokens import issue
from taugrid.workdir.snapshot import create_snapshot


def upload(tau: Tau, tmp_path: Path) -> tuple[str, str, bytes]:
    """A real snapshot, uploaded as `tau run` does; (server url, digest, archive)."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text("print('from the snapshot')\n")
    info = create_snapshot(project, [], tmp_path / "store")
    body = info.path.read_bytes()
    url = tau.server_info()["url"]
    put = httpx.put(
        f"{url}/api/v1/snapshots/{info.digest}",
        content=body,
        headers={"Authorization": f"Bearer {tau.token()}"},
        timeout=30,
    )
    assert put.status_code == 201, put.text
    return url, info.digest, body


def key(tau: Tau) -> bytes:
    return (tau.home / "code-token.key").read_text().strip().encode()


def test_only_the_attempts_code_token_reads_the_snapshot(tau: Tau, tmp_path: Path) -> None:
    tau.start_server()
    url, digest, body = upload(tau, tmp_path)
    now = time.time()

    def get(token: str, of: str = digest) -> httpx.Response:
        return httpx.get(
            f"{url}/api/v1/snapshots/{of}", headers={"Authorization": f"Bearer {token}"}
        )

    good = get(issue(key(tau), digest, "r-1", 0, now))
    assert good.status_code == 200 and good.content == body
    assert os.stat(tau.home / "code-token.key").st_mode & 0o077 == 0
    # Another snapshot's token, an expired one, one signed with another key, the user's
    # own API token: all 401, and no answer tells whether the snapshot exists.
    other = "e" * 64
    assert get(issue(key(tau), other, "r-2", 0, now), of=digest).status_code == 401
    assert get(issue(key(tau), digest, "r-1", 0, now - 7200, ttl_s=60)).status_code == 401
    assert get(issue(b"not the server's key", digest, "r-1", 0, now)).status_code == 401
    assert get(tau.token()).status_code == 401
    assert get(issue(key(tau), other, "r-2", 0, now), of=other).status_code == 404
    # The token opens nothing else of the API.
    runs = httpx.get(
        f"{url}/api/v1/runs",
        headers={"Authorization": f"Bearer {issue(key(tau), digest, 'r-1', 0, now)}"},
    )
    assert runs.status_code == 401


def test_the_init_container_helper_fetches_from_a_real_server(tau: Tau, tmp_path: Path) -> None:
    tau.start_server()
    url, digest, _ = upload(tau, tmp_path)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    env = {
        **os.environ,
        "TAU_SNAPSHOT_URL": f"{url}/api/v1/snapshots/{digest}",
        "TAU_SNAPSHOT_SHA256": digest,
        "TAU_SNAPSHOT_TOKEN": issue(key(tau), digest, "r-1", 0, time.time()),
        "TAU_CODE_DIR": str(workspace),
    }
    out = subprocess.run(
        [sys.executable, "-m", "taugrid.podhelper", "fetch-code"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert (workspace / "train.py").read_text() == "print('from the snapshot')\n"
    # The key survives a restart: a token issued before still works after.
    token = env["TAU_SNAPSHOT_TOKEN"]
    tau.stop_server()
    tau.start_server()
    url = tau.server_info()["url"]
    again = httpx.get(
        f"{url}/api/v1/snapshots/{digest}", headers={"Authorization": f"Bearer {token}"}
    )
    assert again.status_code == 200
