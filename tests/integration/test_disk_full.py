"""A full disk under TAU_HOME, on a real small tmpfs mounted by the test.

Issue 9: a full disk gave a plain-text 500, the run that filled it ended Lost with an
empty log, and one run could stop all submissions. Now the run ends FAILED with reason
DiskFull and a log that says so, the API answers with the JSON ``disk_full`` error
(HTTP 507), submissions work again once space is freed, and ``resources.disk`` stops a
run whose files grow over it.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tauproc import Tau, wait_gone

from leftovers import kill_leftover_supervisors
from servicecheck import require_service

PY = sys.executable
DISK = 64 << 20
FILL = (
    "import os\n"
    "print('filling the disk', flush=True)\n"
    "with open(os.path.join(os.environ['TAU_OUTPUT_DIR'], 'fill'), 'wb') as f:\n"
    "    while True:\n"
    "        f.write(b'x' * (1 << 20))\n"
    "        f.flush()\n"
)
WRITE_5M = (
    "import os, time\n"
    "open(os.path.join(os.environ['TAU_OUTPUT_DIR'], 'blob'), 'wb').write(os.urandom(5 << 20))\n"
    "print('wrote 5 MiB', flush=True)\n"
    "time.sleep(60)\n"
)


@pytest.fixture
def small_home(tmp_path: Path) -> Iterator[Tau]:
    """A Tau whose TAU_HOME is a 64 MiB tmpfs; the server keeps 8 MiB free."""
    home = tmp_path / "home"
    home.mkdir()
    mount = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK}", "tmpfs", str(home)],
        capture_output=True,
        text=True,
        check=False,
    )
    require_service(mount.returncode == 0, f"mounting a tmpfs as TAU_HOME: {mount.stderr.strip()}")
    work = tmp_path / "work"
    work.mkdir()
    tau = Tau(home=home, cwd=work, extra_env={"TAU_MIN_FREE_DISK": "8Mi"})
    try:
        yield tau
    finally:
        with contextlib.suppress(OSError, ValueError, KeyError):
            pid = int(tau.server_info()["pid"])
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
                wait_gone(pid)
        kill_leftover_supervisors(home)
        subprocess.run(["umount", "-l", str(home)], check=False)


def _request(tau: Tau, method: str, path: str, body: bytes = b"") -> tuple[int, str, bytes]:
    url = tau.server_info()["url"].removeprefix("http://")
    host, port = url.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request(
            method,
            path,
            body=body,
            headers={
                "Authorization": f"Bearer {tau.token()}",
                "Content-Type": "application/octet-stream",
                "Content-Length": str(len(body)),
            },
        )
        resp = conn.getresponse()
        return resp.status, resp.getheader("content-type") or "", resp.read()
    finally:
        conn.close()


def _wait(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_full_disk_fails_the_run_clearly_and_refuses_new_work_in_json(small_home: Tau) -> None:
    tau = small_home
    tau.start_server("--gpus", "1")
    assert (tau.home / "disk.reserve").stat().st_size == 16 << 20  # the server's reserve
    holder = tau.json("run", "--name", "holder", "--gpus", "1", "--", "sleep", "300")["run"]["id"]
    tau.wait_state(holder, {"RUNNING"})
    waiter = tau.json("run", "--name", "waiter", "--gpus", "1", "--", "true")["run"]["id"]

    filler = tau.json("run", "--name", "filler", "--", PY, "-c", FILL)["run"]["id"]
    done = tau.wait_state(filler, {"FAILED", "SUCCEEDED", "CANCELLED"}, timeout=30)
    assert (done["state"], done["reason"]) == ("FAILED", "DiskFull"), done
    assert done["message"].startswith("the disk holding TAU_HOME is full (")
    assert done["attempt_list"][0]["failure_class"] == "disk"
    log = tau("logs", filler, check=True).stdout
    assert "the disk holding TAU_HOME is full" in log  # not an empty log

    # New work is refused with the documented error while the disk is full.
    refused = tau("run", "--name", "late", "--", "true")
    assert refused.returncode == 10, refused.stderr
    assert "disk holding TAU_HOME" in refused.stderr and "--min-free-disk" in refused.stderr
    # An upload that meets ENOSPC: the JSON error, not a plain-text 500; nothing kept.
    blob = os.urandom(24 << 20)
    status, ctype, body = _request(
        tau, "PUT", f"/api/v1/snapshots/{hashlib.sha256(blob).hexdigest()}", blob
    )
    assert (status, ctype) == (507, "application/json"), body[:300]
    assert json.loads(body)["error"]["code"] == "disk_full"
    assert not list((tau.home / "snapshots").glob(".upload-*"))
    # State changes still commit (the server gave its reserve back), but the GPU that
    # frees up is not given to the queued run while the disk is full.
    assert tau("cancel", holder).returncode == 0
    assert tau.json("status", holder)["state"] == "CANCELLED"
    _wait(
        lambda: (tau.json("status", waiter).get("pending") or {}).get("reason") == "DiskFull",
        10,
        "the waiting run to say why",
    )
    assert tau.json("status", waiter)["state"] == "QUEUED"

    # Space freed: the queued run starts, submissions work again, the reserve is back.
    (tau.home / "runs" / filler / "outputs" / "fill").unlink()
    assert tau.wait_state(waiter, {"SUCCEEDED", "FAILED"}, timeout=30)["state"] == "SUCCEEDED"
    _wait(lambda: (tau.home / "disk.reserve").exists(), 10, "the server's reserve")
    ok = tau.json("run", "--name", "after", "--", "true")["run"]["id"]
    assert tau.wait_state(ok, {"SUCCEEDED", "FAILED"}, timeout=30)["state"] == "SUCCEEDED"


def test_a_run_over_its_disk_limit_is_stopped(small_home: Tau) -> None:
    tau = small_home
    tau.extra_env["TAU_RUN_DISK_LIMIT"] = "2Mi"  # the server's default limit
    (tau.cwd / "tau.yaml").write_text(
        f"name: greedy\ncommand: [{json.dumps(PY)}, -c, {json.dumps(WRITE_5M)}]\n"
        "resources: {disk: 1Mi}\nrestart: {max: 2, on: [error]}\n"
    )
    own = tau.json("run")["run"]["id"]
    default = tau.json("run", "--name", "plain", "--", PY, "-c", WRITE_5M)["run"]["id"]
    began = time.monotonic()
    done = tau.wait_state(own, {"FAILED", "SUCCEEDED", "CANCELLED"}, timeout=30)
    assert (done["state"], done["reason"]) == ("FAILED", "DiskLimitExceeded"), done
    assert "over its disk limit of 1.0 MiB (1048576 bytes)" in done["message"]
    assert done["attempts"] == 1 and done["restarts"] == 0  # a disk failure never restarts
    assert done["attempt_list"][0]["failure_class"] == "disk"
    assert "over its disk limit" in tau("logs", own, check=True).stdout
    plain = tau.wait_state(default, {"FAILED", "SUCCEEDED", "CANCELLED"}, timeout=30)
    assert plain["reason"] == "DiskLimitExceeded" and "2.0 MiB (2097152 bytes)" in plain["message"]
    assert time.monotonic() - began < 25  # well before their 60 s sleeps ended
