"""The same server on PostgreSQL: a run end to end, and a restart keeps it."""

from __future__ import annotations

from tauproc import Tau


def test_run_on_postgresql_survives_restart(tau: Tau, postgres_url: str) -> None:
    tau.extra_env["TAU_DATABASE_URL"] = postgres_url
    proc = tau("run", "--wait", "--name", "pg", "--", "sh", "-c", "echo on-postgres")
    assert proc.returncode == 0, proc.stderr
    assert not (tau.home / "tau.db").exists()  # nothing went to SQLite
    tau.stop_server()
    data = tau.json("status", "pg")
    assert data["state"] == "SUCCEEDED"
    assert [e["to_state"] for e in data["events"]][-1] == "SUCCEEDED"
    assert tau("logs", "pg", check=True).stdout == "on-postgres\n"
