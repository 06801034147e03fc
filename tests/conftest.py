"""Shared fixtures. Services a test needs may be missing on a developer's machine; there
the test skips with the reason. CI sets TAU_REQUIRE_SERVICES=1 and then it fails."""

from __future__ import annotations

import os

import pytest

from servicecheck import require_service

POSTGRES_URL = os.environ.get(
    "TAU_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


@pytest.fixture
def postgres_url() -> str:
    import sqlalchemy

    try:
        eng = sqlalchemy.create_engine(POSTGRES_URL)
        with eng.begin() as conn:
            conn.exec_driver_sql(
                "DROP TABLE IF EXISTS snapshot_workspaces, audit, memberships, tokens, "
                "workspaces, users, attempts, events, runs, policies, gpu_health, health_events, "
                "alembic_version"
            )
        eng.dispose()
    except Exception as exc:
        require_service(False, f"PostgreSQL not reachable at {POSTGRES_URL}: {exc}")
    return POSTGRES_URL
