"""Shared fixtures. Services a test needs may be missing on a developer's machine; there
the test skips with the reason. CI sets TAU_REQUIRE_SERVICES=1 and then it fails."""

from __future__ import annotations

import os
from typing import Any

import pytest

from servicecheck import require_service

POSTGRES_URL = os.environ.get(
    "TAU_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
# Under pytest-xdist each worker has a database of its own (test_gw0, test_gw1, ...), made
# on first use beside the configured one: the fixture drops every table before a test.
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")


def _worker_url(sqlalchemy: Any) -> str:
    if not WORKER:
        return POSTGRES_URL
    base = sqlalchemy.engine.make_url(POSTGRES_URL)
    name = f"{base.database}_{WORKER}"
    admin = sqlalchemy.create_engine(base, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            exists = conn.exec_driver_sql(
                "SELECT 1 FROM pg_database WHERE datname = %(name)s", {"name": name}
            ).first()
            if exists is None:
                conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    finally:
        admin.dispose()
    return base.set(database=name).render_as_string(hide_password=False)


@pytest.fixture
def postgres_url() -> str:
    import sqlalchemy

    try:
        url = _worker_url(sqlalchemy)
        eng = sqlalchemy.create_engine(url)
        with eng.begin() as conn:
            conn.exec_driver_sql(
                "DROP TABLE IF EXISTS snapshot_workspaces, audit, memberships, tokens, "
                "workspaces, users, attempts, events, runs, policies, gpu_health, health_events, "
                "alembic_version"
            )
        eng.dispose()
    except Exception as exc:
        require_service(False, f"PostgreSQL not reachable at {POSTGRES_URL}: {exc}")
    return url
