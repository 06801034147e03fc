"""A real ``tau server`` process per test and the real ``tau`` CLI in subprocesses."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from tauproc import Tau, wait_gone

from leftovers import kill_leftover_supervisors


@pytest.fixture
def tau(tmp_path: Path) -> Iterator[Tau]:
    work = tmp_path / "work"
    work.mkdir()
    t = Tau(home=tmp_path / "home", cwd=work)
    yield t
    try:
        info = t.server_info()
    except OSError:
        info = None
    if info:
        try:
            os.kill(int(info["pid"]), signal.SIGTERM)
            wait_gone(int(info["pid"]))
        except ProcessLookupError:
            pass
    kill_leftover_supervisors(t.home)
