"""Concurrency, crash and restart: runs are recorded once and survive the server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
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


@pytest.mark.timeout(400)
def test_200_concurrent_tau_run_processes_recorded_exactly_once(tau: Tau) -> None:
    # No server yet: the first CLIs race to auto-start it, and exactly one must win.
    def submit(i: int) -> subprocess.CompletedProcess[str]:
        return tau("run", "--name", f"c{i}", "--", "true", timeout=300)

    with ThreadPoolExecutor(max_workers=20) as pool:
        procs = list(pool.map(submit, range(200)))
    assert [p.returncode for p in procs] == [0] * 200, [p.stderr for p in procs if p.returncode]
    runs = tau.json("list", "--limit", "1000")["runs"]
    assert sorted(r["name"] for r in runs) == sorted(f"c{i}" for i in range(200))
    assert len({r["id"] for r in runs}) == 200
    deadline = time.monotonic() + 120
    while {r["state"] for r in runs} != {"SUCCEEDED"} and time.monotonic() < deadline:
        time.sleep(0.5)
        runs = tau.json("list", "--limit", "1000")["runs"]
    assert {r["state"] for r in runs} == {"SUCCEEDED"}


def test_resubmitting_with_the_same_idempotency_key_returns_the_first_run(tau: Tau) -> None:
    info = tau.start_server()
    first = tau.json("run", "--name", "seed", "--", "true")
    rec = tau.json("status", first["run"]["id"])
    body = {
        "spec_source": "<command line>",
        "file_text": None,
        "overrides": [],
        "resolved": {**rec["spec"]["resolved"], "name": "burst"},
        # No spec_hash: `resolved` is changed here, and the server hashes it itself.
        "snapshot_digest": rec["spec"]["snapshot_digest"],
        "submitter": "test",
        "env": {"PATH": os.environ["PATH"], "HF_TOKEN": "secret-value"},
    }
    keys = [str(uuid.uuid4()) for _ in range(40)]

    def post(key: str) -> int:
        return _post(info["url"], tau.token(), "/api/v1/runs", body, key)

    with ThreadPoolExecutor(max_workers=16) as pool:
        codes = list(pool.map(post, keys + keys))  # every key sent twice, concurrently
    assert sorted(codes) == [200] * 40 + [201] * 40
    runs = tau.json("list", "--name", "burst", "--limit", "1000")["runs"]
    assert len(runs) == 40
    detail = tau("status", runs[0]["id"], "-o", "json", check=True).stdout
    assert "secret-value" not in detail and "HF_TOKEN" not in detail  # allow-list held


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
