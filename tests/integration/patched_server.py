"""Start the real ``python -m taugrid.server`` with a few lines of Python run first.

For faults that no request can cause on purpose (a route failing in a way nobody
expected) or races too short to hit reliably: the server is the real one, with one
function wrapped by the given ``prelude``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tauproc import wait_gone

LAUNCH = """
import runpy, sys
{prelude}
sys.argv = ["taugrid.server", *sys.argv[1:]]
runpy.run_module("taugrid.server", run_name="__main__", alter_sys=True)
"""


def start(home: Path, prelude: str, *args: str, log: Path | None = None) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAU_")}
    argv = [sys.executable, "-c", LAUNCH.format(prelude=prelude), "--home", str(home), *args]
    if log is None:
        return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with log.open("ab") as out:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)


def wait_published(
    home: Path, proc: subprocess.Popen[bytes], timeout: float = 60
) -> dict[str, Any]:
    path = home / "server.json"
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, f"the server exited ({proc.returncode}) before publishing"
        assert time.monotonic() < deadline, f"no server.json after {timeout:.0f} s"
        time.sleep(0.001)
    info: dict[str, Any] = json.loads(path.read_text())
    return info


def stop(*procs: subprocess.Popen[bytes]) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        p.wait(timeout=30)
        wait_gone(p.pid)


@contextmanager
def running(home: Path, prelude: str, *args: str, log: Path | None = None) -> Iterator[str]:
    """The server's URL while it runs."""
    proc = start(home, prelude, *args, log=log)
    try:
        yield str(wait_published(home, proc)["url"])
    finally:
        stop(proc)
