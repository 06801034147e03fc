"""Secrets reach the workload's environment and nothing else: not the database, the API,
the launch files, TauGrid's logs or `tau diff`."""

from __future__ import annotations

import hashlib
import sys

from tauproc import Tau, write_spec

SECRET = "hf_sk-TOPSECRET-7f3a9c1e"


def _everything_under(tau: Tau) -> bytes:
    blobs = []
    for path in sorted(tau.home.rglob("*")):
        if path.is_file() and "secrets" not in path.relative_to(tau.home).parts:
            blobs.append(path.read_bytes())
    return b"\n".join(blobs)


def test_secret_is_given_to_the_workload_and_stored_nowhere_else(tau: Tau) -> None:
    tau.start_server()
    missing = write_spec(
        tau.cwd,
        "name: leak\ncommand: 'echo x'\nsecrets: {HF_TOKEN: hf/token}\n",
        "missing.yaml",
    )
    proc = tau("run", missing.name)
    assert proc.returncode == 2
    assert "tau secret set hf/token" in proc.stderr
    assert tau.json("list")["runs"] == []

    proc = tau("secret", "set", "hf/token", input_text=SECRET)
    assert proc.returncode == 0, proc.stderr
    script = (
        "import hashlib, os; "
        "print('sha', hashlib.sha256(os.environ['HF_TOKEN'].encode()).hexdigest())"
    )
    write_spec(
        tau.cwd,
        f"name: leak\ncommand: [{sys.executable!r}, -c, {script!r}]\n"
        "secrets: {HF_TOKEN: hf/token}\n",
    )
    a = tau.json("run")["run"]
    b = tau.json("run", "--set", "env.OTHER=1")["run"]
    for run in (a, b):
        done = tau.wait_state(run["id"], {"SUCCEEDED", "FAILED"})
        assert done["state"] == "SUCCEEDED", done["events"]
    logs = tau("logs", a["id"], check=True).stdout
    assert f"sha {hashlib.sha256(SECRET.encode()).hexdigest()}" in logs

    outputs = [
        tau("status", a["id"], "-o", "json", check=True).stdout,
        tau("status", a["id"], check=True).stdout,
        tau("list", "-o", "json", check=True).stdout,
        tau("diff", a["id"], b["id"], check=True).stdout,
        tau("diff", a["id"], b["id"], "-o", "json", check=True).stdout,
        tau("secret", "list", "-o", "json", check=True).stdout,
    ]
    for out in outputs:
        assert SECRET not in out
    assert "hf/token" in outputs[-1]
    # The database, WAL, server log, launch/status files and supervisor logs.
    assert SECRET.encode() not in _everything_under(tau)
