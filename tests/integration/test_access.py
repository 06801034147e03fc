"""Access control on a shared server: a negative-access matrix over every endpoint and
role, token lifecycle, the audit log and rate limiting, against the real server."""

from __future__ import annotations

import os
import stat
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from tauproc import Tau, write_spec

from servicecheck import require_bwrap

POLICY = """\
flavors:
  - name: cpu
cluster_queues:
  - name: shared
    resources:
      - flavor: cpu
        quotas: {gpu: 0, cpu: 64, memory: 64Gi}
workspaces:
  - name: a
    local_queues: [{name: main, cluster_queue: shared}]
  - name: b
    local_queues: [{name: main, cluster_queue: shared}]
priority_classes:
  - {name: normal, value: 1000, default: true}
"""

MEMBERS = {
    "maint": ("a", "maintainer"),
    "res": ("a", "researcher"),
    "res2": ("a", "researcher"),
    "view": ("a", "viewer"),
    "outsider": ("b", "researcher"),
}


class World:
    def __init__(self, tau: Tau) -> None:
        self.tau = tau
        require_bwrap()
        info = tau.start_server("--shared")
        self.url = f"{info['url']}/api/v1"
        self.admin_token = (tau.home / "admin-token").read_text().strip()
        self.tokens: dict[str, str] = {"admin": self.admin_token}
        self.clients: dict[str, httpx.Client] = {}

    def api(self, who: str) -> httpx.Client:
        if who not in self.clients:
            self.clients[who] = httpx.Client(
                base_url=self.url,
                headers={"Authorization": f"Bearer {self.tokens[who]}"},
                timeout=30,
            )
        return self.clients[who]

    def close(self) -> None:
        for c in self.clients.values():
            c.close()


@pytest.fixture
def world(tau: Tau) -> Iterator[World]:
    w = World(tau)
    try:
        yield w
    finally:
        w.close()


def _ok(resp: httpx.Response) -> Any:
    assert resp.status_code < 300, (resp.status_code, resp.text)
    return resp.json() if resp.content else None


def _setup(world: World) -> dict[str, Any]:
    tau, admin = world.tau, world.api("admin")
    _ok(admin.put("/admin/policy", json={"source": "policy.yaml", "text": POLICY}))
    for ws in ("a", "b"):
        _ok(admin.post("/admin/workspaces", json={"name": ws}))
    for user, (ws, role) in MEMBERS.items():
        _ok(admin.post("/admin/users", json={"name": user}))
        _ok(admin.put(f"/admin/workspaces/{ws}/members/{user}", json={"role": role}))
        world.tokens[user] = _ok(admin.post("/admin/tokens", json={"user": user}))["token"]
    # A submit body to reuse (snapshot uploaded by the local CLI, as the machine's owner).
    # stop_grace 5s: a cancel that lands while the sandbox is still starting has been seen
    # to wait out the grace under load (left for the sandbox's own issue); access is what
    # this test is about, so the kill that follows the grace comes soon.
    write_spec(
        tau.cwd,
        "name: job\ncommand: [sleep, '60']\nworkspace: a\nqueue: main\nstop_grace: 5s\n",
    )
    first = tau.json("run")["run"]
    tau("cancel", first["id"], check=True)
    spec = tau.json("status", first["id"])["spec"]
    # The CLI uploaded the snapshot for workspace a; b's runs need it uploaded for b.
    digest = spec["snapshot_digest"]
    archive = tau.home / "cache" / "snapshots" / f"{digest}.tar.gz"
    _ok(admin.put(f"/snapshots/{digest}?workspace=b", content=archive.read_bytes()))
    body = {
        "spec_source": spec["source"],
        "file_text": spec["file_text"],
        "overrides": [],
        "resolved": spec["resolved"],  # changed below: no spec_hash, the server hashes it
        "snapshot_digest": spec["snapshot_digest"],
        "submitter": "whoever-the-body-claims",
    }
    runs = {}
    for who, ws in (("res", "a"), ("res2", "a"), ("outsider", "b")):
        b = {**body, "resolved": {**body["resolved"], "workspace": ws, "name": who}}
        resp = world.api(who).post("/runs", json=b, headers={"Idempotency-Key": str(uuid.uuid4())})
        runs[who] = _ok(resp)["run"]
        assert runs[who]["submitter"] == who  # the token says who submits, not the body
    return {"body": body, "runs": runs}


def _state(world: World, run_id: str) -> str:
    return str(_ok(world.api("admin").get(f"/runs/{run_id}"))["state"])


def test_negative_access_matrix(world: World) -> None:
    ctx = _setup(world)
    runs, body = ctx["runs"], ctx["body"]
    r_res, r_res2, r_b = runs["res"]["id"], runs["res2"]["id"], runs["outsider"]["id"]
    everyone = ["admin", *MEMBERS]
    in_a = {"admin", "maint", "res", "res2", "view"}

    # Lists show only what the caller may see.
    for who in everyone:
        seen = {r["id"] for r in _ok(world.api(who).get("/runs"))["runs"]}
        want = {r_res, r_res2, r_b} if who == "admin" else set()
        if who in in_a - {"admin"}:
            want = {r_res, r_res2}
        if who == "outsider":
            want = {r_b}
        assert seen & {r_res, r_res2, r_b} == want, who

    # Reads of a run: 200 inside the workspace, 404 (not 403) outside; also by prefix/name.
    reads = ["", "/events", "/logs", "/artifacts", "/checkpoints", "/metrics"]
    for who in everyone:
        for suffix in reads:
            for rid, readers in ((r_res, in_a), (r_b, {"admin", "outsider"})):
                code = world.api(who).get(f"/runs/{rid}{suffix}").status_code
                assert code == (200 if who in readers else 404), (who, rid, suffix, code)
        by_name = world.api(who).get("/runs/outsider").status_code
        assert by_name == (200 if who in ("admin", "outsider") else 404), who

    # Mutations refused change nothing: forbidden in the workspace, not found outside it.
    refused = [
        ("res", f"/runs/{r_res2}/cancel", 403),
        ("view", f"/runs/{r_res}/cancel", 403),
        ("outsider", f"/runs/{r_res}/cancel", 404),
        ("res", f"/runs/{r_b}/cancel", 404),
    ]
    for who, path, code in refused:
        assert world.api(who).post(path).status_code == code, (who, path)
    batch = _ok(world.api("res").post("/runs/cancel", json={"runs": [r_res2, r_b]}))
    assert [r["error"]["code"] for r in batch["results"]] == ["forbidden", "not_found"]
    for rid in (r_res, r_res2, r_b):
        assert _state(world, rid) not in ("CANCELLED",), rid

    # Submitting: viewers may not, outsiders do not even see the workspace.
    for who, code in (("view", 403), ("outsider", 404)):
        b = {**body, "resolved": {**body["resolved"], "workspace": "a", "name": "sneaky"}}
        resp = world.api(who).post("/runs", json=b, headers={"Idempotency-Key": "k-" + who})
        assert resp.status_code == code, (who, resp.text)
    for who, code in (("view", 403), ("outsider", 404)):
        item = {**body, "resolved": {**body["resolved"], "workspace": "a", "name": "sneaky"}}
        resp = world.api(who).post("/runs/batch", json={"runs": [item, item]})
        assert resp.status_code == code, (who, resp.text)
    assert not [r for r in _ok(world.api("admin").get("/runs"))["runs"] if r["name"] == "sneaky"]
    status_report = {"attempt_dir": "/x", "status": {}}
    for who in everyone:  # only supervisors (the local token) report attempt status
        resp = world.api(who).post("/internal/attempt-status", json=status_report)
        assert resp.status_code == 404, who

    # Platform administration and secrets: a non-admin is told they do not exist.
    admin_reads = ["/admin/workspaces", "/admin/users", "/admin/tokens", "/admin/audit", "/secrets"]
    for who in MEMBERS:
        api = world.api(who)
        for path in admin_reads:
            assert api.get(path).status_code == 404, (who, path)
        assert api.post("/admin/users", json={"name": "evil"}).status_code == 404
        assert api.post("/admin/tokens", json={"user": who}).status_code == 404
        assert api.put("/admin/policy", json={"text": POLICY}).status_code == 404
        assert api.put("/secrets/x", json={"value": "v"}).status_code == 404
        assert (
            api.put("/admin/workspaces/a/members/view", json={"role": "admin"}).status_code == 404
        )
    assert "evil" not in {u["name"] for u in _ok(world.api("admin").get("/admin/users"))["users"]}

    # Allowed changes: a researcher cancels their own run, a maintainer anyone's in a.
    assert _ok(world.api("res").post(f"/runs/{r_res}/cancel"))["id"] == r_res
    assert _ok(world.api("maint").post(f"/runs/{r_res2}/cancel"))["id"] == r_res2
    # Resume: the researcher's own finished run yes, another's no.
    world.tau.wait_state(r_res2, {"CANCELLED"})
    assert world.api("res").post(f"/runs/{r_res2}/resume").status_code == 403
    world.tau.wait_state(r_res, {"CANCELLED"})
    assert _ok(world.api("res").post(f"/runs/{r_res}/resume"))["state"] == "QUEUED"
    _ok(world.api("admin").post("/runs/cancel", json={"runs": [r_res, r_b]}))

    # whoami tells each caller who they are.
    me = _ok(world.api("res").get("/whoami"))
    assert me == {
        "user": "res",
        "kind": "user",
        "admin": False,
        "memberships": {"a": "researcher"},
        "auth": "token",
    }

    # The audit log has every mutation, allowed or refused, with who and from where.
    entries = _ok(world.api("admin").get("/admin/audit", params={"limit": 1000}))["entries"]
    refusals = {(e["actor"], e["action"], e["outcome"]) for e in entries}
    assert ("res", "run.cancel", "forbidden") in refusals
    assert ("outsider", "run.cancel", "not_found") in refusals
    assert ("view", "run.submit", "forbidden") in refusals
    assert ("maint", "run.cancel", "ok") in refusals
    assert ("admin", "token.create", "ok") in refusals
    assert all(e["source"] == "127.0.0.1" for e in entries)
    assert not any(world.tokens["res"] in str(e) for e in entries)  # no secret in the log
    jsonl = world.tau("admin", "audit", "--actor", "res", "--jsonl", check=True).stdout
    assert jsonl.strip() and all(line.startswith("{") for line in jsonl.splitlines())


def test_token_lifecycle_and_bootstrap(world: World) -> None:
    path = world.tau.home / "admin-token"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    admin = world.api("admin")
    _ok(admin.post("/admin/users", json={"name": "ci", "kind": "service"}))
    made = _ok(admin.post("/admin/tokens", json={"user": "ci", "name": "ci"}))
    short = _ok(admin.post("/admin/tokens", json={"user": "ci", "expires_in_s": 1}))
    listed = _ok(admin.get("/admin/tokens", params={"user": "ci"}))["tokens"]
    assert {t["id"] for t in listed} == {made["id"], short["id"]}
    assert all("token" not in t and "hash" not in t and "salt" not in t for t in listed)

    def status(token: str) -> int:
        hdr = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.get(f"{world.url}/whoami", headers=hdr, timeout=10).status_code

    assert status(made["token"]) == 200
    time.sleep(1.2)
    assert status(short["token"]) == 401  # expired
    assert status(made["token"][:-1] + ("A" if made["token"][-1] != "A" else "B")) == 401
    for bad in ("", "garbage", "tau_", "tau_nope_x", made["token"].replace("tau_", "xyz_")):
        assert status(bad) == 401, bad
    assert admin.delete(f"/admin/tokens/{made['id']}").status_code == 204
    assert status(made["token"]) == 401  # revoked
    again = _ok(admin.post("/admin/tokens", json={"user": "ci"}))
    assert status(again["token"]) == 200
    _ok(admin.post("/admin/users/ci/disable"))
    assert status(again["token"]) == 401  # disabled user


def test_failed_logins_are_rate_limited_per_source(world: World) -> None:
    for _ in range(10):
        r = httpx.get(f"{world.url}/whoami", headers={"Authorization": "Bearer tau_x_y"})
        assert r.status_code == 401
    # A valid token is never refused (it used to be: the whole address was blocked).
    valid = httpx.get(
        f"{world.url}/whoami", headers={"Authorization": f"Bearer {world.admin_token}"}
    )
    assert valid.status_code == 200
    blocked = httpx.get(f"{world.url}/whoami", headers={"Authorization": "Bearer tau_x_y"})
    assert blocked.status_code == 429
    assert blocked.json()["error"]["code"] == "rate_limited"


def test_spec_fields_that_escape_a_workspace_are_rejected(world: World) -> None:
    for field in (
        "namespace: kube-system",
        "privileged: true",
        "service_account: root",
        "host_path: /",
        "hostPath: /",
    ):
        write_spec(world.tau.cwd, f"name: x\ncommand: echo\n{field}\n", "esc.yaml")
        proc = world.tau("run", "esc.yaml")
        assert proc.returncode == 2 and "unknown field" in proc.stderr, (field, proc.stderr)


def test_local_server_binds_to_loopback_only(tau: Tau) -> None:
    proc = tau("server", "start", "--host", "0.0.0.0")
    assert proc.returncode == 2 and "needs --shared" in proc.stderr
    assert not (tau.home / "server.json").exists()


def test_tokens_record_when_they_were_last_used(world: World) -> None:
    admin = world.api("admin")
    _ok(admin.post("/admin/users", json={"name": "worker"}))
    made = _ok(admin.post("/admin/tokens", json={"user": "worker"}))
    before = _ok(admin.get("/admin/tokens", params={"user": "worker"}))["tokens"][0]
    assert before["last_used_at"] is None
    hdr = {"Authorization": f"Bearer {made['token']}"}
    assert httpx.get(f"{world.url}/whoami", headers=hdr).status_code == 200
    after = _ok(admin.get("/admin/tokens", params={"user": "worker"}))["tokens"][0]
    assert after["last_used_at"] is not None and after["last_used_at"] >= made["created_at"]


def test_context_login_and_default_workspace(world: World) -> None:
    ctx = _setup(world)
    tau = world.tau
    url = world.url.removesuffix("/api/v1")
    proc = tau(
        "login",
        url,
        "--token-stdin",
        "--name",
        "lab",
        "--workspace",
        "a",
        input_text=world.tokens["res"],
    )
    assert proc.returncode == 0, proc.stderr
    assert "as res" in proc.stdout + proc.stderr
    write_spec(tau.cwd / "ctx", "name: mine\nqueue: main\ncommand: [sleep, '30']\n")
    run = tau.json("--context", "lab", "run", cwd=tau.cwd / "ctx")["run"]
    assert run["workspace"] == "a" and run["submitter"] == "res"
    # The researcher's view through the context: their workspace only.
    listed = {r["id"] for r in tau.json("--context", "lab", "list")["runs"]}
    assert run["id"] in listed and ctx["runs"]["outsider"]["id"] not in listed
    other = tau("--context", "lab", "status", ctx["runs"]["outsider"]["id"])
    assert other.returncode == 5  # another workspace's run does not exist for them
    tau("--context", "lab", "cancel", run["id"], check=True)
    bad = tau("login", url, "--token-stdin", "--name", "bad", input_text="tau_nope_nope")
    assert bad.returncode == 4


def test_workspace_option_scopes_run_lookups(world: World) -> None:
    _setup(world)
    tau = world.tau
    ids = {}
    for ws in ("a", "b"):
        run = tau.json(
            "run", "--workspace", ws, "--queue", "main", "--name", "twin", "--", "sleep", "30"
        )["run"]
        ids[ws] = run["id"]
    assert tau.json("status", "twin")["id"] == ids["b"]  # the latest, any workspace
    assert tau.json("status", "twin", "--workspace", "a")["id"] == ids["a"]
    listed = tau.json("status", "--workspace", "a")["runs"]
    assert {r["workspace"] for r in listed} == {"a"}
    assert tau("status", ids["b"], "--workspace", "a").returncode == 5
    out = tau.json("cancel", "twin", "--workspace", "a")
    assert [r["id"] for r in out["runs"]] == [ids["a"]]
    assert tau.json("status", ids["b"])["state"] != "CANCELLED"
    tau("cancel", ids["b"], check=True)


def test_per_user_limits_apply_to_the_authenticated_user(world: World) -> None:
    ctx = _setup(world)
    admin = world.api("admin")
    limited = POLICY.replace(
        "    local_queues: [{name: main, cluster_queue: shared}]\n  - name: b",
        "    local_queues: [{name: main, cluster_queue: shared}]\n"
        "    user_limits: {max_running_runs: 1}\n  - name: b",
    )
    assert "user_limits" in limited
    _ok(admin.put("/admin/policy", json={"source": "policy.yaml", "text": limited}))
    body = ctx["body"]
    first = ctx["runs"]["res"]["id"]  # res already runs one in workspace a
    world.tau.wait_state(first, {"RUNNING"})

    def submit(who: str) -> str:
        b = {**body, "resolved": {**body["resolved"], "workspace": "a", "name": who + "-x"}}
        headers = {"Idempotency-Key": str(uuid.uuid4())}
        return str(_ok(world.api(who).post("/runs", json=b, headers=headers))["run"]["id"])

    second = submit("res")
    deadline = time.monotonic() + 20
    while True:
        run = _ok(admin.get(f"/runs/{second}"))
        if run["pending"] is not None or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert run["state"] == "QUEUED" and run["pending"]["reason"] == "UserLimit", run
    assert "res" in run["pending"]["message"]
    # Another user of the same workspace is not held back by res's limit.
    other = submit("maint")
    world.tau.wait_state(other, {"RUNNING"})
    _ok(
        admin.post(
            "/runs/cancel",
            json={
                "runs": [
                    first,
                    second,
                    other,
                    ctx["runs"]["res2"]["id"],
                    ctx["runs"]["outsider"]["id"],
                ]
            },
        )
    )
