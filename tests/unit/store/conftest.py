"""Every store test runs on real SQLite and on real PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import Engine

from taugrid.store import connect


@pytest.fixture(params=["sqlite", "postgres"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Engine:
    url = (
        f"sqlite:///{tmp_path / 'tau.db'}"
        if request.param == "sqlite"
        else request.getfixturevalue("postgres_url")
    )
    eng = connect(url)
    request.addfinalizer(eng.dispose)
    return eng
