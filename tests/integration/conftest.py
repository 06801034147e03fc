"""A real ``tau server`` process per test and the real ``tau`` CLI in subprocesses."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tauproc import Tau


@pytest.fixture
def tau(tmp_path: Path) -> Iterator[Tau]:
    work = tmp_path / "work"
    work.mkdir()
    t = Tau(home=tmp_path / "home", cwd=work)
    yield t
    t.tear_down()
