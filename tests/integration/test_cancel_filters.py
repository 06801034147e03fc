"""`tau cancel` by filter: --name, --state, --all, asking first unless --yes."""

from __future__ import annotations

from tauproc import Tau, write_spec


def test_cancel_by_name_state_and_all(tau: Tau) -> None:
    write_spec(tau.cwd, "name: sweep\ncommand: [sleep, '60']\nstop_grace: 2s\n")
    sweep = [tau.json("run")["run"]["id"] for _ in range(3)]
    other = tau.json("run", "--name", "other")["run"]["id"]
    for rid in [*sweep, other]:
        tau.wait_state(rid, {"RUNNING"})

    # A script gets no prompt: it must say --yes, and nothing is cancelled meanwhile.
    asked = tau("cancel", "--name", "sweep")
    assert asked.returncode == 2
    assert "this would cancel 3 runs (3 running); add --yes" in asked.stderr
    assert {tau.json("status", r)["state"] for r in sweep} == {"RUNNING"}

    done = tau("cancel", "--name", "sweep", "--yes", check=True)
    assert sorted(line.split()[1] for line in done.stdout.splitlines()) == sorted(sweep)
    assert {tau.json("status", r)["state"] for r in sweep} == {"CANCELLED"}
    assert tau.json("status", other)["state"] == "RUNNING"

    # --state picks by state; a finished run is never chosen.
    none = tau("cancel", "--state", "queued", "--yes", check=True)
    assert "no unfinished run matches" in none.stderr
    assert tau.json("status", other)["state"] == "RUNNING"
    tau("cancel", "--all", "--yes", check=True)
    assert tau.json("status", other)["state"] == "CANCELLED"

    both = tau("cancel", other, "--all")
    assert both.returncode == 2 and "not both" in both.stderr
    neither = tau("cancel")
    assert neither.returncode == 2 and "--state, --name or --all" in neither.stderr
