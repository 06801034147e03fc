"""``python -m taugrid.server --migrate-only`` (the Helm chart's pre-upgrade Job) as a real
process: it brings an empty SQLite or PostgreSQL database to the newest schema and exits,
a second run finds it current, and a database it cannot reach is one line and exit 1;
the password never appears."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import sqlalchemy

MIGRATE = [sys.executable, "-m", "taugrid.server", "--migrate-only"]


def migrate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*MIGRATE, *args], capture_output=True, text=True, timeout=120, check=False
    )


def newest_revision() -> str:
    versions = Path(__file__).resolve().parents[2] / "src/taugrid/store/migrations/versions"
    return max(p.stem for p in versions.glob("0*.py")).split("_")[0]


def test_an_empty_sqlite_home_is_migrated_and_a_second_run_changes_nothing(
    tmp_path: Path,
) -> None:
    done = migrate("--home", str(tmp_path / "home"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("is the newest")
    db = sqlite3.connect(tmp_path / "home" / "tau.db")
    (revision,) = db.execute("SELECT version_num FROM alembic_version").fetchone()
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    db.close()
    assert revision.startswith(newest_revision()) and {"runs", "events", "attempts"} <= tables
    again = migrate("--home", str(tmp_path / "home"))
    assert again.returncode == 0 and again.stdout == done.stdout


def test_an_empty_postgresql_database_is_migrated(postgres_url: str) -> None:
    engine = sqlalchemy.create_engine(postgres_url)
    with engine.connect() as conn:
        assert not sqlalchemy.inspect(conn).has_table("runs")  # the fixture emptied it
    done = migrate("--database-url", postgres_url)
    assert done.returncode == 0, done.stderr
    with engine.connect() as conn:
        assert sqlalchemy.inspect(conn).has_table("runs")
        assert conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar()
    engine.dispose()


def test_a_database_it_cannot_reach_is_one_line_without_the_password() -> None:
    done = migrate("--database-url", "postgresql+psycopg://tau:s3cr3t-pw@127.0.0.1:1/tau")
    assert done.returncode == 1
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "127.0.0.1" in done.stderr and "s3cr3t-pw" not in done.stderr + done.stdout
    assert "Traceback" not in done.stderr
