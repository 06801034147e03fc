"""Start-up checks of isolation: a shared server that cannot sandbox its workloads refuses
to start with one line saying why (and publishes nothing); everything under TAU_HOME is
private, and what an older version left open is tightened at start."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from tauproc import Tau, write_spec

from servicecheck import require_bwrap

WHY_BWRAP = "bubblewrap (bwrap) is needed for the workload sandbox"


def _server(tau: Tau, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "taugrid.server", "--home", str(tau.home), *args],
        env=tau.env(**env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_shared_server_without_bubblewrap_refuses_to_start(tau: Tau) -> None:
    direct = _server(tau, "--shared", TAU_BWRAP="/nonexistent/bwrap")
    assert direct.returncode != 0
    assert direct.stderr.strip().splitlines()[-1] == (
        "a shared server runs every workload in a sandbox so it cannot read TAU_HOME, other "
        "runs or the server's tokens; bubblewrap (/nonexistent/bwrap) was not found: install "
        "it (Debian/Ubuntu: apt install bubblewrap) or name it with --bwrap PATH"
    )
    assert not (tau.home / "server.json").exists()
    cli = tau("server", "start", "--shared", TAU_BWRAP="/nonexistent/bwrap")
    assert cli.returncode != 0
    assert "bubblewrap (/nonexistent/bwrap) was not found: install it" in cli.stderr
    assert len(cli.stderr.strip().splitlines()) == 1
    assert not (tau.home / "server.json").exists()
    assert not (tau.home / "admin-token").exists()  # nothing half-created either


def test_a_shared_server_refuses_to_run_workloads_unisolated(tau: Tau) -> None:
    cli = tau("server", "start", "--shared", "--isolation", "none")
    assert cli.returncode == 2
    assert "a shared server must isolate workloads (--isolation sandbox)" in cli.stderr
    direct = _server(tau, "--shared", TAU_ISOLATION="none")
    assert direct.returncode == 2
    assert "must isolate workloads" in direct.stderr
    assert _server(tau, "--workload-uids", "0-100", "--isolation", "sandbox").returncode == 2
    assert not (tau.home / "server.json").exists()


def test_a_sandbox_that_does_not_work_is_refused_with_bwraps_reason(tau: Tau) -> None:
    fake = tau.home.parent / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    direct = _server(tau, "--shared", "--bwrap", str(fake))
    assert direct.returncode == 1
    line = direct.stderr.strip().splitlines()[-1]
    assert line.startswith(
        "a shared server runs every workload in a sandbox so it cannot read TAU_HOME, other "
        "runs or the server's tokens; the sandbox does not work on this machine: "
    )
    assert "bwrap: No permissions to create new namespace" in line
    assert not (tau.home / "server.json").exists()
    assert not [p for p in tau.home.iterdir() if p.name.startswith(".sandbox-probe")]


def _open_files(home: Path) -> list[str]:
    found = []
    for top, dirs, files in os.walk(home):
        for name in [*dirs, *files]:
            path = Path(top) / name
            mode = os.lstat(path).st_mode
            if not stat.S_ISLNK(mode) and mode & 0o077:
                found.append(f"{path.relative_to(home)} {stat.S_IMODE(mode):04o}")
    return found


@pytest.mark.parametrize("isolation", ["none", "sandbox"])
def test_everything_under_tau_home_is_private_after_a_run(tau: Tau, isolation: str) -> None:
    if isolation == "sandbox":
        require_bwrap(WHY_BWRAP)
    tau.start_server("--isolation", isolation)
    work = tau.cwd / "job"
    write_spec(
        work,
        "name: job\noutputs: [made.txt, script.sh]\n"
        'command: "echo m > made.txt; echo o > $TAU_OUTPUT_DIR/o.txt; '
        "mkdir -p $TAU_CHECKPOINT_DIR/step-0000000001; python3 -c 'import taugrid' || true\"\n",
    )
    (work / "script.sh").write_text("#!/bin/sh\n")
    (work / "script.sh").chmod(0o755)  # its mode travels in the snapshot
    run = tau.json("run", cwd=work)["run"]["id"]
    assert tau.wait_state(run, {"SUCCEEDED", "FAILED"})["state"] == "SUCCEEDED"
    tau("secret", "set", "some/key", input_text="v", check=True)
    assert (tau.home / "runs" / run / "outputs" / "made.txt").exists()
    assert stat.S_IMODE(tau.home.stat().st_mode) == 0o700
    assert _open_files(tau.home) == []


def test_an_open_tau_home_is_tightened_at_start(tau: Tau) -> None:
    home = tau.home
    (home / "secrets" / "default").mkdir(parents=True)
    home.chmod(0o755)
    for name in ("tau.db", "server.log", "secrets/default/old@key"):
        (home / name).write_text("")
        (home / name).chmod(0o644)
    (home / "secrets").chmod(0o755)
    tau.start_server()
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    for name in ("tau.db", "secrets", "secrets/default/old@key"):
        assert not (home / name).stat().st_mode & 0o077, name
    log = (home / "server.log").read_text()
    assert f"{home / 'tau.db'} was open to other users (mode 0644); now 0600" in log
    assert _open_files(home) == []
