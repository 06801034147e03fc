"""Issue 10, the local mode's semantics where a researcher met them, through the real CLI
and server: a workspace's default queue, one notion of workspace, GPUs that a server
remembers, a restarted run's start and duration, CPU quantities, the cheap checks before
the snapshot, `tau diff` of snapshot files, and rendering the built-in policy."""

from __future__ import annotations

import hashlib
import io
import json
import os
import sys
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from ruamel.yaml import YAML
from tauproc import Tau, write_spec

from servicecheck import require_bwrap
from taugrid.executors.local.executor import find_ray_cli
from taugrid.executors.local.gpus import NvmlGpus
from taugrid.spec.modes import LOCAL, LOCAL_WITHOUT_RAY

# A local server offers launcher: ray where Ray is installed beside it (taugrid[ray]).
SERVER_CAPS = LOCAL if find_ray_cli(sys.executable) else LOCAL_WITHOUT_RAY

PY = sys.executable

# The example workspace of docs/policy.md: queues main and urgent, main the default.
POLICY = """\
flavors:
  - name: gpu
cluster_queues:
  - name: team-a
    resources:
      - flavor: gpu
        quotas: {gpu: 2, cpu: 2, memory: 8Gi}
workspaces:
  - name: team-a
    local_queues:
      - {name: main, cluster_queue: team-a}
      - {name: urgent, cluster_queue: team-a}
    default_queue: main
"""
POLICY_FIX = "add it under workspaces: in policy.yaml and run tau admin policy apply policy.yaml"
# Holds its GPU until the gate file appears (or SIGTERM).
HOLD = (
    "import os, signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))\n"
    "while not os.path.exists(sys.argv[1]): time.sleep(0.05)\n"
)


def _apply(tau: Tau, text: str) -> None:
    policy = write_spec(tau.cwd, text, "policy.yaml")
    tau("admin", "policy", "apply", str(policy), check=True)


def _hold(tau: Tau, gate: Path, *args: str) -> str:
    run = tau.json("run", *args, "--set", "stop_grace=2s", "--", PY, "-c", HOLD, str(gate))
    return str(run["run"]["id"])


def test_a_run_naming_no_queue_goes_to_the_workspace_default_queue(tau: Tau) -> None:
    tau.start_server("--gpus", "0")
    _apply(tau, POLICY)
    # Before: the spec filled in `queue: default` and every plain run was refused with
    # "queue 'default' does not exist in workspace 'team-a'".
    plain = tau.json("run", "--workspace", "team-a", "--wait", "--", "true")
    assert plain["state"] == "SUCCEEDED" and plain["queue"] == "main", plain
    assert plain["spec"]["resolved"]["queue"] == "main"  # the record shows the queue used
    assert any("in queue main" in e["message"] for e in plain["events"])
    urgent = tau.json("run", "--workspace", "team-a", "--queue", "urgent", "--", "true")["run"]
    assert urgent["queue"] == "urgent"
    # `tau validate` leaves it to the server: the spec as written names no queue.
    write_spec(tau.cwd, 'workspace: team-a\ncommand: "true"\n')
    assert tau.json("validate")["resolved"]["queue"] is None
    missing = tau("run", "--workspace", "team-a", "--queue", "nope", "--", "true")
    assert missing.returncode == 2 and "queues: main, urgent" in missing.stderr


def test_records_that_say_queue_default_diff_and_rerun_as_before(tau: Tau) -> None:
    # Under the built-in policy `default` stays the queue: a spec that says
    # `queue: default` (what every older record holds) is the same run to `tau diff` as
    # one that names none, and reruns of either resolve the queue again.
    tau.start_server("--gpus", "0")
    write_spec(tau.cwd, 'name: same\ncommand: "true"\n')
    implicit = tau.json("run", "--wait")
    explicit = tau.json("run", "--queue", "default", "--wait")
    assert implicit["queue"] == explicit["queue"] == "default"
    diff = tau.json("diff", implicit["id"], explicit["id"])
    assert diff["spec"] == [], diff["spec"]
    again = tau.json("rerun", explicit["id"], "--wait")
    assert (again["state"], again["queue"]) == ("SUCCEEDED", "default")


def test_a_new_workspace_runs_at_once_and_a_missing_queue_says_how_to_add_it(tau: Tau) -> None:
    tau.start_server("--gpus", "0")
    made = tau("admin", "workspace", "create", "alpha", check=True)
    assert "note:" not in made.stderr  # the built-in policy gives it a queue
    # Before: "workspace 'alpha' does not exist" although it had just been created.
    run = tau.json("run", "--workspace", "alpha", "--wait", "--", "true")
    assert (run["state"], run["workspace"], run["queue"]) == ("SUCCEEDED", "alpha", "default")
    assert "alpha/default" in tau.json("queues")["queues"][0]["local_queues"]
    unknown = tau("run", "--workspace", "nope", "--", "true")
    assert unknown.returncode == 2, unknown.stderr
    assert "workspace 'nope' does not exist" in unknown.stderr
    assert "tau admin workspace create nope" in unknown.stderr
    tau("admin", "workspace", "delete", "alpha", check=True)  # and its queue goes with it
    gone = tau("run", "--workspace", "alpha", "--", "true")
    assert gone.returncode == 2 and "workspace 'alpha' does not exist" in gone.stderr
    tau("admin", "workspace", "create", "alpha", check=True)

    # An applied policy that leaves alpha out: the error says exactly that, and how.
    _apply(tau, POLICY)
    refused = tau("run", "--workspace", "alpha", "--", "true")
    assert refused.returncode == 2, refused.stderr
    assert (
        f"workspace 'alpha' exists but the policy in force gives it no queue; {POLICY_FIX}"
        in refused.stderr
    )
    beta = tau("admin", "workspace", "create", "beta", check=True)
    assert f"the policy in force gives workspace 'beta' no queue yet; {POLICY_FIX}" in beta.stderr
    assert tau.json("admin", "workspace", "create", "gamma")["note"].endswith(POLICY_FIX)


def test_declared_gpus_survive_a_stop_and_a_crash(tau: Tau, tmp_path: Path) -> None:
    tau.start_server("--gpus", "2")
    gate = tmp_path / "gate"
    holder = _hold(tau, gate, "--gpus", "1")
    tau.wait_state(holder, {"RUNNING"})
    try:
        for end in ("stop", "crash"):
            tau.stop_server() if end == "stop" else tau.kill_server()
            # The CLI starts the server again by itself: with the GPUs it had. Before:
            # 0 GPUs, the re-adopted run shown as `1/0 (+1)`, new GPU runs unschedulable.
            (queue,) = tau.json("queues")["queues"]
            assert queue["quota"]["local"]["gpu"] == 2 and queue["used"]["local"]["gpu"] == 1
            assert queue["borrowed"]["local"]["gpu"] == 0
            assert tau.json("status", holder)["state"] == "RUNNING"
        other = tau.json("run", "--gpus", "1", "--wait", "--", "true")
        assert other["state"] == "SUCCEEDED", other
    finally:
        gate.write_text("go")
    assert tau.wait_state(holder, {"SUCCEEDED", "FAILED"})["state"] == "SUCCEEDED"
    assert (tau.home / "server-settings.json").stat().st_mode & 0o777 == 0o600


def test_server_start_against_a_running_server_and_server_status(tau: Tau) -> None:
    stopped = tau("server", "status")
    assert stopped.returncode == 3, stopped  # service managers' "not running"; before: 0
    assert "not running" in stopped.stdout
    as_json = tau("server", "status", "-o", "json")
    assert as_json.returncode == 3
    assert json.loads(as_json.stdout) == {"running": False, "home": str(tau.home)}

    tau.start_server("--gpus", "2")
    status = tau.json("server", "status")
    assert (status["gpus"], status["gpus_declared"], status["isolation"]) == (2, True, "none")
    text = tau("server", "status", check=True).stdout
    for line in ("GPUs:      2 (declared)", "isolation: none", "database:  sqlite:///"):
        assert line in text, text
    # Another count against the running server: a conflict that says what to do.
    # Before: exit 0 and nothing changed.
    more = tau("server", "start", "--gpus", "4")
    assert more.returncode == 7, more
    assert "already runs with 2 GPUs (declared)" in more.stderr
    assert "tau server stop, then tau server start --gpus 4" in more.stderr
    same = tau("server", "start", "--gpus", "2")
    assert same.returncode == 0 and "with 2 GPUs (declared)" in same.stdout, same
    retention = tau("server", "start", "--retention", "1d")
    assert retention.returncode == 7 and "--retention cannot change" in retention.stderr
    assert tau.json("queues")["queues"][0]["quota"]["local"]["gpu"] == 2  # unchanged


def test_an_over_quota_run_is_not_shown_borrowing(tau: Tau, tmp_path: Path) -> None:
    detected = len(NvmlGpus().gpus())
    tau.start_server("--gpus", str(detected + 2))
    gate = tmp_path / "gate"
    holder = _hold(tau, gate, "--gpus", str(detected + 1))
    tau.wait_state(holder, {"RUNNING"})
    try:
        tau.stop_server()
        tau.start_server("--gpus", str(detected))
        # The re-adopted run holds more than the queue has now: used over nominal, and no
        # cohort to borrow from. Before: `1/0 (+1)`, "borrowed" from nowhere.
        (queue,) = tau.json("queues")["queues"]
        assert queue["used"]["local"]["gpu"] == detected + 1
        assert queue["quota"]["local"]["gpu"] == detected
        assert queue["borrowed"]["local"]["gpu"] == 0
        table = tau("queues", check=True).stdout
        assert f"{detected + 1}/{detected} " in table and "(+" not in table, table
    finally:
        gate.write_text("go")
    tau.wait_state(holder, {"SUCCEEDED", "FAILED"})


def test_gpus_auto_detects_again_from_then_on(tau: Tau) -> None:
    # (TAU_LOCAL_GPUS for one start: tests/unit/server/test_remembered_settings.py)
    detected = len(NvmlGpus().gpus())
    tau.start_server("--gpus", str(detected + 2))
    tau.stop_server()
    tau.start_server("--gpus", "auto")  # forgets the count
    status = tau.json("server", "status")
    assert (status["gpus"], status["gpus_declared"]) == (detected, False), status
    assert json.loads((tau.home / "server-settings.json").read_text()) == {}
    tau.stop_server()
    assert tau.json("queues")["queues"][0]["quota"]["local"]["gpu"] == detected  # auto-start


def test_a_restarted_run_started_with_its_first_attempt(tau: Tau) -> None:
    fail_first = (
        "import os, sys, time\n"
        "time.sleep(0.5)\n"
        "sys.exit(1 if os.environ['TAU_ATTEMPT'] == '0' else 0)\n"
    )
    write_spec(
        tau.cwd,
        f"name: flaky\ncommand: [{json.dumps(PY)}, -c, {json.dumps(fail_first)}]\n"
        "restart: {max: 1, on: [error], backoff: 0s}\n",
    )
    run = tau.json("run", "--wait")
    assert (run["state"], run["attempts"]) == ("SUCCEEDED", 2), run
    first, last = run["attempt_list"]
    # Before: the run's start was its last attempt's, and Duration covered that one only.
    assert run["started_at"] == first["started_at"] < last["started_at"]
    assert run["finished_at"] - run["started_at"] > last["finished_at"] - last["started_at"]
    text = tau("status", run["id"], check=True).stdout
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(first["started_at"]))
    latest = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(last["started_at"]))
    assert f"Started:    {started}   (attempt 1 started {latest})" in text, text
    assert "(from the first attempt's start)" in text


def test_cpus_take_kubernetes_quantities_as_the_policy_does(tau: Tau) -> None:
    tau.start_server("--gpus", "0")
    _apply(tau, POLICY.replace("cpu: 2,", 'cpu: "1500m",'))
    # Before: `resources.cpus: 500m` was refused ("must be a number").
    half = tau.json(
        "run", "--workspace", "team-a", "--set", "resources.cpus=500m", "--wait", "--", "true"
    )
    assert half["state"] == "SUCCEEDED" and half["spec"]["resolved"]["resources"]["cpus"] == "500m"
    # The scheduler counts millicores: 1.6 cores can never fit a 1500m queue, 1.5 can.
    over = tau("run", "--workspace", "team-a", "--set", "resources.cpus=1600m", "--", "true")
    assert over.returncode == 8 and "1.6 CPUs" in over.stderr, over.stderr
    fits = tau.json(
        "run", "--workspace", "team-a", "--set", "resources.cpus=1.5", "--wait", "--", "true"
    )
    assert fits["state"] == "SUCCEEDED"
    bad = tau("run", "--set", "resources.cpus=lots", "--", "true")
    assert bad.returncode == 2 and "is not CPU cores such as 4, 0.5" in bad.stderr


def test_a_missing_secret_or_queue_is_told_before_the_workdir_is_archived(tau: Tau) -> None:
    tau.start_server("--gpus", "0")
    big = tau.cwd / "data"
    big.mkdir()
    for i in range(16):  # 64 MiB that does not compress: seconds to archive here
        (big / f"part{i}.bin").write_bytes(os.urandom(4 << 20))
    write_spec(tau.cwd, 'name: big\ncommand: "true"\nsecrets: {HF_TOKEN: hf/token}\n')
    cache = tau.home / "cache" / "snapshots"
    began = time.monotonic()
    refused = tau("run")
    took = time.monotonic() - began
    assert refused.returncode == 2, refused.stderr
    assert "secret 'hf/token' is not set in workspace 'default'" in refused.stderr
    # Before: the whole workdir was archived (and the archive kept) before the submit
    # told about the secret.
    assert not list(cache.glob("*.tar.gz")), "archived before the cheap checks"
    tau("secret", "set", "hf/token", input_text="value\n", check=True)
    nope = tau("run", "--queue", "nope")
    assert nope.returncode == 2 and "queue 'nope' does not exist" in nope.stderr
    assert not list(cache.glob("*.tar.gz"))
    assert tau.json("list")["runs"] == []
    began = time.monotonic()
    assert tau.json("run", "--wait")["state"] == "SUCCEEDED"
    print(f"refused in {took:.2f}s; submitted with the snapshot in {time.monotonic() - began:.2f}s")
    assert list(cache.glob("*.tar.gz"))


def test_diff_lists_the_files_that_differ_between_the_snapshots(tau: Tau) -> None:
    tau.start_server("--gpus", "0")
    write_spec(tau.cwd, 'name: code\ncommand: "true"\n')
    (tau.cwd / "train.py").write_text("print('v1')\n")
    (tau.cwd / "old.py").write_text("gone soon\n")
    (tau.cwd / "same.txt").write_text("unchanged\n")
    a = tau.json("run", "--wait")["id"]
    (tau.cwd / "train.py").write_text("print('version two')\n")
    (tau.cwd / "old.py").unlink()
    (tau.cwd / "new.py").write_text("x" * 3000)
    b = tau.json("run", "--wait")["id"]
    diff = tau.json("diff", a, b)
    assert diff["code"]["files"] == [
        {"path": "new.py", "change": "added", "a_size": None, "b_size": 3000},
        {"path": "old.py", "change": "removed", "a_size": 10, "b_size": None},
        {"path": "train.py", "change": "changed", "a_size": 12, "b_size": 21},
    ]
    text = tau("diff", a, b, check=True).stdout
    assert "  files: 1 changed, 1 added, 1 removed:" in text, text
    for line in ("    + new.py (2.9 KiB)", "    - old.py (10 B)", "    ~ train.py (12 B -> 21 B)"):
        assert line in text, text
    assert tau.json("diff", a, a)["code"]["files"] == []


def test_policy_render_without_a_file_renders_the_builtin_default(tau: Tau) -> None:
    tau.start_server("--gpus", "3")
    tau("admin", "workspace", "create", "alpha", check=True)
    # Before: "the server runs the built-in default policy; give a FILE to render".
    proc = tau("admin", "policy", "render", "--namespace-prefix", "tau-")
    assert proc.returncode == 0, proc.stderr
    docs = list(YAML(typ="safe").load_all(proc.stdout))
    (queue,) = [d for d in docs if d["kind"] == "ClusterQueue"]
    (flavor,) = queue["spec"]["resourceGroups"][0]["flavors"]
    assert {"name": "nvidia.com/gpu", "nominalQuota": "3"} in flavor["resources"], flavor
    local_queues = {
        (d["metadata"]["namespace"], d["metadata"]["name"])
        for d in docs
        if d["kind"] == "LocalQueue"
    }
    assert local_queues == {("tau-default", "default"), ("tau-alpha", "default")}
    shown = tau("admin", "policy", "show", check=True).stdout
    assert shown.startswith("# built-in default policy") and "name: alpha" in shown


def test_server_start_passes_the_disk_settings_through(tau: Tau) -> None:
    # Before: no such options on `tau server start` (only on python -m taugrid.server).
    tau.start_server("--min-free-disk", "99%", "--run-disk-limit", "1Mi")
    full = tau("run", "--", "true")
    assert full.returncode == 10, full.stderr
    assert "--min-free-disk" in full.stderr
    tau.stop_server()
    bad = tau("server", "start", "--run-disk-limit", "lots")
    assert bad.returncode == 3 and "--run-disk-limit" in bad.stderr, bad.stderr


def test_snapshot_listings_and_checks_need_the_rights_that_runs_need(tau: Tau) -> None:
    require_bwrap()
    url = tau.start_server("--shared")["url"]
    tokens = {"admin": (tau.home / "admin-token").read_text().strip()}

    clients: dict[str, httpx.Client] = {}

    def api(who: str) -> httpx.Client:
        if who not in clients:
            headers = {"Authorization": f"Bearer {tokens[who]}"}
            clients[who] = httpx.Client(base_url=f"{url}/api/v1", headers=headers, timeout=30)
        return clients[who]

    try:
        _check_rights(api, tokens)
    finally:
        for c in clients.values():
            c.close()


def _check_rights(api: Callable[[str], httpx.Client], tokens: dict[str, str]) -> None:
    admin = api("admin")
    for ws in ("a", "b"):
        assert admin.post("/admin/workspaces", json={"name": ws}).status_code == 201
    for user, ws, role in (
        ("res", "a", "researcher"),
        ("view", "a", "viewer"),
        ("out", "b", "researcher"),
    ):
        assert admin.post("/admin/users", json={"name": user}).status_code == 201
        admin.put(f"/admin/workspaces/{ws}/members/{user}", json={"role": role}).raise_for_status()
        tokens[user] = admin.post("/admin/tokens", json={"user": user}).json()["token"]
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as tar:
        member = tarfile.TarInfo("job.py")
        member.size = 5
        tar.addfile(member, io.BytesIO(b"pass\n"))
    digest = hashlib.sha256(raw.getvalue()).hexdigest()
    res = api("res")
    res.put(
        f"/snapshots/{digest}", params={"workspace": "a"}, content=raw.getvalue()
    ).raise_for_status()
    resolved = {"name": "job", "workspace": "a", "command": ["sleep", "30"]}
    body = {"spec_source": "tau.yaml", "resolved": resolved}

    # The check answers what a submit would, and records nothing: a new workspace has the
    # built-in queue, a viewer may not submit, a non-member learns nothing.
    checked = res.post("/runs/check", json=body)
    assert checked.status_code == 200, checked.text
    assert checked.json() == {
        "workspace": "a",
        "queue": "default",
        "cluster_queue": "default",
        "priority": "normal",
        "capabilities": SERVER_CAPS.to_dict(),  # what the mode accepts: tau run's notes
    }
    assert api("view").post("/runs/check", json=body).status_code == 403
    hidden = api("out").post("/runs/check", json=body)
    assert hidden.status_code == 404 and "workspace 'a' does not exist" in hidden.text
    assert admin.get("/runs").json()["runs"] == []

    run = res.post("/runs", json={**body, "snapshot_digest": digest})
    assert run.status_code == 201, run.text
    run_id = run.json()["run"]["id"]
    try:
        for who in ("res", "view", "admin"):  # whoever may read the run
            listing = api(who).get(f"/runs/{run_id}/snapshot")
            assert listing.status_code == 200, (who, listing.text)
            assert listing.json()["files"] == [
                {
                    "path": "job.py",
                    "type": "file",
                    "size": 5,
                    "sha256": hashlib.sha256(b"pass\n").hexdigest(),
                }
            ]
        # Another workspace's run does not exist for the caller, by id or prefix.
        for ref in (run_id, run_id[:6]):
            denied = api("out").get(f"/runs/{ref}/snapshot")
            assert denied.status_code == 404 and "job.py" not in denied.text
    finally:
        admin.post("/runs/cancel", json={"runs": [run_id]})
