"""Concurrency, crash and restart: runs are recorded once and survive the server."""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tauproc import Tau

PY = sys.executable


def _post(url: str, token: str, path: str, body: dict[str, object], key: str) -> int:
    req = urllib.request.Request(
        url + path,
        data=json.dumps(body).encode(),
        method="POST",
        headers={
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
            "Idempotency-Key": key,
        },
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        return int(resp.status)


def test_200_concurrent_submissions_recorded_exactly_once(tau: Tau) -> None:
    info = tau.start_server()
    # Upload one snapshot through the CLI, then reuse its submit payload shape.
    first = tau.json("run", "--name", "seed", "--", "true")
    rec = tau.json("status", first["run"]["id"])
    body = {
        "spec_source": "<command line>",
        "file_text": None,
        "overrides": [],
        "resolved": {**rec["spec"]["resolved"], "name": "burst"},
        "spec_hash": rec["spec"]["hash"],
        "snapshot_digest": rec["spec"]["snapshot_digest"],
        "submitter": "test",
        "env": {"PATH": os.environ["PATH"]},
    }
    keys = [str(uuid.uuid4()) for _ in range(200)]
    with ThreadPoolExecutor(max_workers=32) as pool:
        codes = list(
            pool.map(lambda k: _post(info["url"], tau.token(), "/api/v1/runs", body, k), keys)
        )
        # a retry storm with the same keys must not create anything new
        retries = list(
            pool.map(lambda k: _post(info["url"], tau.token(), "/api/v1/runs", body, k), keys[:50])
        )
    assert codes == [201] * 200 and retries == [200] * 50
    runs = tau.json("list", "--name", "burst", "--limit", "1000")["runs"]
    assert len(runs) == 200 and len({r["id"] for r in runs}) == 200
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        runs = tau.json("list", "--name", "burst", "--limit", "1000")["runs"]
        if all(r["state"] == "SUCCEEDED" for r in runs):
            break
        time.sleep(0.5)
    assert {r["state"] for r in runs} == {"SUCCEEDED"}


def test_kill_9_server_runs_finish_with_correct_results(tau: Tau, tmp_path: Path) -> None:
    tau.start_server()
    gate = tmp_path / "gate"
    script = (
        f"import os, time\nprint('started', flush=True)\n"
        f"while not os.path.exists({str(gate)!r}): time.sleep(0.05)\n"
        "print('finished', flush=True)\nraise SystemExit({code})\n"
    )
    ids = {}
    for name, code in (("ok", 0), ("bad", 4)):
        sub = tau.json("run", "--name", name, "--", PY, "-c", script.format(code=code))
        ids[name] = sub["run"]["id"]
    quick = tau.json(
        "run",
        "--name",
        "quick",
        "--",
        "sh",
        "-c",
        f"while [ ! -e {gate} ]; do sleep 0.05; done; echo quick-done",
    )["run"]["id"]
    for rid in ids.values():
        tau.wait_state(rid, {"RUNNING"})
    tau.wait_state(quick, {"RUNNING"})

    tau.kill_server()
    gate.write_text("go")  # the runs finish while no server is up
    time.sleep(1.0)
    tau.start_server()

    ok = tau.wait_state(ids["ok"], {"SUCCEEDED", "FAILED"})
    bad = tau.wait_state(ids["bad"], {"SUCCEEDED", "FAILED"})
    q = tau.wait_state(quick, {"SUCCEEDED", "FAILED"})
    assert (ok["state"], ok["exit_code"]) == ("SUCCEEDED", 0)
    assert (bad["state"], bad["exit_code"], bad["reason"]) == ("FAILED", 4, "ExitCode")
    assert q["state"] == "SUCCEEDED"
    assert tau("logs", ids["ok"], check=True).stdout == "started\nfinished\n"
    assert tau("logs", quick, check=True).stdout == "quick-done\n"
    # every transition recorded once, in order
    assert [e["to_state"] for e in ok["events"]] == [
        "PENDING",
        "QUEUED",
        "ADMITTED",
        "RUNNING",
        "SUCCEEDED",
    ]


def test_server_restart_readopts_a_running_run(tau: Tau, tmp_path: Path) -> None:
    tau.start_server()
    gate = tmp_path / "gate"
    rid = tau.json(
        "run",
        "--name",
        "long",
        "--",
        "sh",
        "-c",
        f"echo a; while [ ! -e {gate} ]; do sleep 0.05; done; echo b",
    )["run"]["id"]
    tau.wait_state(rid, {"RUNNING"})
    tau.kill_server()
    tau.start_server()
    assert tau.json("status", rid)["state"] == "RUNNING"  # re-adopted, not lost
    gate.write_text("go")
    done = tau.wait_state(rid, {"SUCCEEDED", "FAILED"})
    assert done["state"] == "SUCCEEDED"
    assert tau("logs", rid, check=True).stdout == "a\nb\n"


def test_cli_autostarts_one_server_for_concurrent_clients(tau: Tau) -> None:
    with ThreadPoolExecutor(max_workers=4) as pool:
        procs = list(pool.map(lambda _: tau("status"), range(4)))
    assert all(p.returncode == 0 for p in procs), [p.stderr for p in procs]
    pid = tau.server_info()["pid"]
    assert tau.json("server", "status")["pid"] == pid
    mode = (tau.home / "token").stat().st_mode & 0o777
    assert mode == 0o600
    assert tau.server_info()["url"].startswith("http://127.0.0.1:")
