"""Stop what a failed test left running under a TauGrid home. A module of its own (tests/
is on sys.path through its conftest) so integration and end-to-end tests share it."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from pathlib import Path


def kill_leftover_supervisors(home: Path) -> None:
    """A failed test must not leave workloads behind for the next one."""
    for adir in home.glob("runs/*/attempts/*"):
        try:
            status = json.loads((adir / "status.json").read_text())
            if status.get("phase") == "running":
                os.killpg(int(status["pgid"]), signal.SIGKILL)
        except (OSError, ValueError, KeyError):
            pass
        with contextlib.suppress(OSError, ValueError):
            os.kill(int((adir / "supervisor.pid").read_text().strip()), signal.SIGKILL)
