"""Many short runs through a real server: batched transitions, the supervisor fork server,
workdir removal off the engine's pass. Each run must still run once, with every event in
order, and a kill -9 of the server must lose nothing it acknowledged."""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from tauproc import Tau, wait_gone

EVENTS = ["PENDING", "QUEUED", "ADMITTED", "RUNNING", "SUCCEEDED"]
TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED"}


class Api:
    def __init__(self, tau: Tau) -> None:
        info = tau.server_info()
        self.url, self.token = str(info["url"]), tau.token()

    def call(self, method: str, path: str, body: Any = None, key: str | None = None) -> Any:
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
        if key:
            headers["Idempotency-Key"] = key
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        with urllib.request.urlopen(req, timeout=60) as resp:
            raw = resp.read()
        return json.loads(raw) if raw else None

    def run(self, run_id: str) -> dict[str, Any]:
        out: dict[str, Any] = self.call("GET", f"/api/v1/runs/{run_id}")
        return out


def _template(tau: Tau) -> dict[str, Any]:
    """A submit body (snapshot uploaded by a real `tau run`) to vary the command of."""
    seed = tau.json("run", "--name", "seed", "--", "true")["run"]["id"]
    rec = tau.json("status", seed)
    return {
        "spec_source": "<command line>",
        "file_text": None,
        "overrides": [],
        "resolved": rec["spec"]["resolved"],
        "snapshot_digest": rec["spec"]["snapshot_digest"],
        "submitter": "test",
        "env": {"PATH": os.environ["PATH"]},
    }


def _submit(api: Api, template: dict[str, Any], name: str, command: list[str]) -> str:
    body = {**template, "resolved": {**template["resolved"], "name": name, "command": command}}
    out = api.call("POST", "/api/v1/runs", body, key=str(uuid.uuid4()))
    return str(out["run"]["id"])


def _wait_all(api: Api, ids: list[str], timeout: float = 60) -> dict[str, dict[str, Any]]:
    deadline = time.monotonic() + timeout
    done: dict[str, dict[str, Any]] = {}
    while len(done) < len(ids):
        for rid in ids:
            if rid not in done and (run := api.run(rid))["state"] in TERMINAL:
                done[rid] = run
        if time.monotonic() > deadline:
            raise AssertionError(f"{len(ids) - len(done)} runs unfinished")
        time.sleep(0.1)
    return done


def _recording(ledger: Path, then: str = "true") -> list[str]:
    """A workload that appends its run id to ``ledger``: how many times it ran."""
    return ["sh", "-c", f'echo "$TAU_RUN_ID" >> {ledger}; {then}']


def _fork_servers_of(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        for child in (task / "children").read_text().split():
            try:
                cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
            except OSError:
                continue
            if b"--fork-server" in cmdline:
                found.append(int(child))
    return found


def _assert_ran_once_in_order(runs: dict[str, dict[str, Any]], ledger: Path) -> None:
    lines = ledger.read_text().split()
    assert sorted(lines) == sorted(runs), "every run's workload ran exactly once"
    for rid, run in runs.items():
        assert run["state"] == "SUCCEEDED", (rid, run["state"], run["message"])
        assert [e["to_state"] for e in run["events"]] == EVENTS, rid
        times = [e["at"] for e in run["events"]]
        assert times == sorted(times), rid
        assert run["attempts"] == 1


def test_a_burst_of_short_runs_runs_each_once_with_every_event_in_order(
    tau: Tau, tmp_path: Path
) -> None:
    tau.start_server()
    api = Api(tau)
    template = _template(tau)
    ledger = tmp_path / "ran.txt"
    ids = [_submit(api, template, f"b{i}", _recording(ledger)) for i in range(40)]
    runs = _wait_all(api, ids)
    _assert_ran_once_in_order(runs, ledger)
    for rid in ids:  # each workdir gone with its run, its removal done off the pass
        run_dir = tau.home / "runs" / rid
        assert not (run_dir / "workdir").exists()
    deadline = time.monotonic() + 10
    while any((tau.home / "runs").glob("*/.workdir.removing.*")):
        assert time.monotonic() < deadline, "workdirs set aside were never removed"
        time.sleep(0.1)


@pytest.mark.timeout(180)
def test_kill_9_mid_burst_loses_nothing_acknowledged(tau: Tau, tmp_path: Path) -> None:
    tau.start_server()
    api = Api(tau)
    template = _template(tau)
    ledger = tmp_path / "ran.txt"
    # The first ten end by themselves; the others wait for a gate opened only after the
    # kill, so the kill finds runs in every state (finished, running, queued) however
    # fast or slow this machine runs them.
    gate = tmp_path / "gate"
    held = f"while [ ! -e {gate} ]; do sleep 0.05; done"
    ids = [
        _submit(api, template, f"k{i}", _recording(ledger, "sleep 0.3" if i < 10 else held))
        for i in range(40)
    ]
    deadline = time.monotonic() + 60
    while True:
        seen = {rid: api.run(rid) for rid in ids}
        states = {r["state"] for r in seen.values()}
        if "SUCCEEDED" in states and states - TERMINAL:
            break
        assert time.monotonic() < deadline, f"never caught mid-burst: {states}"
        time.sleep(0.05)
    tau.kill_server()
    tau.start_server()
    gate.touch()
    api = Api(tau)
    runs = _wait_all(api, ids)
    _assert_ran_once_in_order(runs, ledger)
    for rid, before in seen.items():  # what was answered before the kill still holds
        n = len(before["events"])
        assert runs[rid]["events"][:n] == before["events"], rid


def test_runs_outlive_the_fork_server_and_new_ones_still_start(tau: Tau, tmp_path: Path) -> None:
    info = tau.start_server()
    api = Api(tau)
    template = _template(tau)  # its supervisor was forked: the fork server runs
    (fork_server,) = _fork_servers_of(int(info["pid"]))
    ledger = tmp_path / "ran.txt"
    long = _submit(api, template, "long", _recording(ledger, "sleep 1.5"))
    deadline = time.monotonic() + 30
    while api.run(long)["state"] != "RUNNING":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    os.kill(fork_server, signal.SIGKILL)
    after = _submit(api, template, "after", _recording(ledger))
    runs = _wait_all(api, [long, after])
    _assert_ran_once_in_order(runs, ledger)


def test_the_fork_server_ends_with_a_killed_server(tau: Tau) -> None:
    info = tau.start_server()
    _template(tau)
    (fork_server,) = _fork_servers_of(int(info["pid"]))
    tau.kill_server()
    wait_gone(fork_server)  # end of file on its stdin: it does not linger


def test_a_workdir_a_killed_server_left_half_removed_is_removed(tau: Tau) -> None:
    aside = tau.home / "runs" / "old-abcde" / ".workdir.removing.0badf00d"
    (aside / "src").mkdir(parents=True)
    (aside / "src" / "train.py").write_text("print(1)\n")
    kept = tau.home / "runs" / "old-abcde" / "attempts" / "0"
    kept.mkdir(parents=True)
    (kept / "output.log").write_text("log\n")
    tau.start_server()
    deadline = time.monotonic() + 10
    while aside.exists():
        assert time.monotonic() < deadline, "the left-over workdir was not removed"
        time.sleep(0.1)
    assert (kept / "output.log").read_text() == "log\n"  # only the workdir goes
