"""The server imports and starts as an arbitrary uid with no passwd entry and no USER, as a
hardened pod runs a container: nothing may ask the passwd database for a name it cannot
have. bubblewrap's user namespace gives the process such a uid (12345, in no passwd file)
while it keeps reaching this machine's interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from servicecheck import require_bwrap

WHY = "bubblewrap (bwrap) is needed to run the server as a uid without a passwd entry"
UID = 12345
NAMES = ("LOGNAME", "USER", "LNAME", "USERNAME")


def _as_uid_without_a_name(argv: list[str], **kw: object) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k not in NAMES and not k.startswith("TAU_")}
    wrap = ["bwrap", "--bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    wrap += ["--unshare-user", "--uid", str(UID), "--gid", str(UID), "--die-with-parent"]
    return subprocess.Popen([*wrap, *argv], env=env, **kw)  # type: ignore[call-overload]


def test_the_uid_has_no_name_so_the_test_means_something() -> None:
    require_bwrap(WHY)
    probe = _as_uid_without_a_name(
        [sys.executable, "-c", "import getpass; getpass.getuser()"], stderr=subprocess.PIPE
    )
    _, err = probe.communicate(timeout=30)
    assert probe.returncode != 0 and b"uid not found" in err


def test_the_server_starts_and_answers_as_a_uid_without_a_passwd_entry(tmp_path: Path) -> None:
    require_bwrap(WHY)
    home = tmp_path / "home"
    log = (tmp_path / "server.log").open("wb")
    server = _as_uid_without_a_name(
        [sys.executable, "-m", "taugrid.server", "--home", str(home), "--gpus", "0"],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        info_path = home / "server.json"
        deadline = time.monotonic() + 30
        while not info_path.exists():
            assert server.poll() is None, (tmp_path / "server.log").read_text()
            assert time.monotonic() < deadline, "no server.json after 30 s"
            time.sleep(0.05)
        info = json.loads(info_path.read_text())
        token = (home / "token").read_text().strip()
        req = urllib.request.Request(
            f"{info['url']}/api/v1/runs?limit=1", headers={"Authorization": f"Bearer {token}"}
        )
        with urllib.request.urlopen(req, timeout=10) as answer:
            assert answer.status == 200
            assert json.loads(answer.read())["runs"] == []
        # The machine's owner, as the local token names it, is the uid itself.
        req = urllib.request.Request(
            f"{info['url']}/api/v1/whoami", headers={"Authorization": f"Bearer {token}"}
        )
        with urllib.request.urlopen(req, timeout=10) as answer:
            assert json.loads(answer.read())["user"] == f"uid-{UID}"
    finally:
        server.terminate()
        server.wait(timeout=20)
        log.close()
