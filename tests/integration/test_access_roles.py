"""Access on a shared server, hardened: a workspace admin is not a platform admin, the
policy and other workspaces' queues stay hidden, failed logins never lock out a valid
token, and X-Forwarded-For counts only from a trusted proxy. Real server, real CLI."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
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
  - name: b-only
    resources:
      - flavor: cpu
        quotas: {gpu: 0, cpu: 8, memory: 8Gi}
workspaces:
  - name: a
    local_queues: [{name: main, cluster_queue: shared}]
  - name: b
    local_queues:
      - {name: main, cluster_queue: shared}
      - {name: big, cluster_queue: b-only}
priority_classes:
  - {name: normal, value: 1000, default: true}
"""

MEMBERS = {"boss": ("a", "admin"), "res": ("a", "researcher"), "resb": ("b", "researcher")}
FORWARDED = "203.0.113.9"


def _ok(resp: httpx.Response) -> Any:
    assert resp.status_code < 300, (resp.status_code, resp.text)
    return resp.json() if resp.content else None


class Lab:
    """A shared server with workspaces a and b and a user per role."""

    def __init__(self, tau: Tau, *start_args: str) -> None:
        require_bwrap()
        self.tau = tau
        info = tau.start_server("--shared", *start_args)
        self.base = str(info["url"])
        self.url = f"{self.base}/api/v1"
        self.tokens = {"admin": (tau.home / "admin-token").read_text().strip()}
        self.token_ids: dict[str, str] = {}
        self.clients: dict[str, httpx.Client] = {}
        admin = self.api("admin")
        _ok(
            admin.put("/admin/policy", json={"source": "/srv/platform/policy.yaml", "text": POLICY})
        )
        for ws in ("a", "b"):
            _ok(admin.post("/admin/workspaces", json={"name": ws}))
        for user, (ws, role) in MEMBERS.items():
            _ok(admin.post("/admin/users", json={"name": user}))
            _ok(admin.put(f"/admin/workspaces/{ws}/members/{user}", json={"role": role}))
            made = _ok(admin.post("/admin/tokens", json={"user": user}))
            self.tokens[user], self.token_ids[user] = made["token"], made["id"]

    def api(self, who: str) -> httpx.Client:
        if who not in self.clients:
            self.clients[who] = httpx.Client(
                base_url=self.url,
                headers={"Authorization": f"Bearer {self.tokens[who]}"},
                timeout=30,
            )
        return self.clients[who]

    def cli(self, who: str, *args: str, **kw: Any) -> Any:
        """``tau ARGS -o json`` as ``who``, through TAU_SERVER and TAU_TOKEN."""
        return self.tau.json(*args, TAU_SERVER=self.base, TAU_TOKEN=self.tokens[who], **kw)

    def submit(self, who: str, workspace: str, queue: str = "main") -> str:
        spec_dir = self.tau.cwd / f"{who}-{workspace}-{queue}"
        write_spec(spec_dir, f"name: job\ncommand: [sleep, '60']\nworkspace: {workspace}\n")
        run = self.cli(who, "run", "--queue", queue, cwd=spec_dir)["run"]
        return str(run["id"])

    def audit(self, **params: str) -> list[dict[str, Any]]:
        entries: list[dict[str, Any]] = _ok(
            self.api("admin").get("/admin/audit", params={"limit": 1000, **params})
        )["entries"]
        return entries

    def close(self) -> None:
        for c in self.clients.values():
            c.close()


@pytest.fixture
def lab(tau: Tau) -> Iterator[Lab]:
    lab = Lab(tau)
    try:
        yield lab
    finally:
        lab.close()


def test_a_workspace_admin_manages_its_workspace_and_is_no_platform_admin(lab: Lab) -> None:
    boss = lab.api("boss")
    me = _ok(boss.get("/whoami"))
    assert me["admin"] is False and me["memberships"] == {"a": "admin"}
    # Platform administration does not exist for them.
    for path in ("/admin/users", "/admin/tokens", "/admin/policy", "/admin/audit"):
        assert boss.get(path).status_code == 404, path
    refused = [
        boss.post("/admin/users", json={"name": "evil", "admin": True}),
        boss.post("/admin/users/res/disable"),
        boss.post("/admin/tokens", json={"user": "res"}),
        boss.post("/admin/tokens", json={"user": "boss"}),
        boss.delete(f"/admin/tokens/{lab.token_ids['res']}"),
        boss.put("/admin/policy", json={"text": POLICY}),
        boss.post("/admin/workspaces", json={"name": "c"}),
        boss.delete("/admin/workspaces/a"),
        boss.put("/admin/workspaces/b/members/boss", json={"role": "admin"}),
        boss.put("/admin/workspaces/b/members/resb", json={"role": "viewer"}),
        boss.delete("/admin/workspaces/b/members/resb"),
    ]
    assert [r.status_code for r in refused] == [404] * len(refused), [r.text for r in refused]
    users = {u["name"]: u for u in _ok(lab.api("admin").get("/admin/users"))["users"]}
    assert "evil" not in users and not users["res"]["disabled"]
    assert users["resb"]["memberships"] == {"b": "researcher"}

    # Their own workspace: they see it and manage its members.
    listed = _ok(boss.get("/admin/workspaces"))["workspaces"]
    assert [w["name"] for w in listed] == ["a"]
    assert listed[0]["members"] == {"boss": "admin", "res": "researcher"}
    assert _ok(boss.put("/admin/workspaces/a/members/resb", json={"role": "viewer"}))["role"] == (
        "viewer"
    )
    assert boss.delete("/admin/workspaces/a/members/resb").status_code == 204
    # The CLI does the same for them, and refuses what is not theirs.
    added = lab.cli("boss", "admin", "workspace", "add-member", "a", "resb", "--role", "viewer")
    assert added == {"workspace": "a", "user": "resb", "role": "viewer"}
    listing = lab.tau("admin", "user", "list", TAU_SERVER=lab.base, TAU_TOKEN=lab.tokens["boss"])
    assert listing.returncode == 5, listing.stderr

    # Every run of their workspace, as a maintainer would; nothing of b.
    run_a, run_b = lab.submit("res", "a"), lab.submit("resb", "b")
    assert _ok(boss.post(f"/runs/{run_a}/cancel"))["id"] == run_a
    assert boss.post(f"/runs/{run_b}/cancel").status_code == 404
    assert boss.get(f"/runs/{run_b}").status_code == 404
    lab.tau.wait_state(run_a, {"CANCELLED"})
    _ok(lab.api("admin").post("/runs/cancel", json={"runs": [run_b]}))

    # Refused administration is audited like any refused change.
    seen = {(e["actor"], e["action"], e["workspace"], e["outcome"]) for e in lab.audit()}
    assert ("boss", "member.set", "b", "not_found") in seen
    assert ("boss", "member.set", "a", "ok") in seen
    assert ("boss", "user.add", None, "not_found") in seen


def test_the_policy_and_other_workspaces_queues_stay_hidden(lab: Lab) -> None:
    assert lab.api("res").get("/admin/policy").status_code == 404
    assert _ok(lab.api("admin").get("/admin/policy"))["source"] == "/srv/platform/policy.yaml"
    running_b = lab.submit("resb", "b")  # b's run uses the shared queue too
    lab.tau.wait_state(running_b, {"RUNNING"})

    mine = _ok(lab.api("res").get("/queues"))
    assert [q["name"] for q in mine["queues"]] == ["shared"]
    assert mine["queues"][0]["local_queues"] == ["a/main"]
    assert mine["queues"][0]["running"] == 1  # the shared queue's usage stays whole
    assert mine["policy"] == "platform policy"  # not a path on the admin's machine

    everything = _ok(lab.api("admin").get("/queues"))
    by_name = {q["name"]: q for q in everything["queues"]}
    assert set(by_name) == {"shared", "b-only"}
    assert by_name["shared"]["local_queues"] == ["a/main", "b/main"]
    assert everything["policy"] == "/srv/platform/policy.yaml"
    nobody = _ok(lab.api("admin").post("/admin/users", json={"name": "nobody"}))["name"]
    lab.tokens[nobody] = _ok(lab.api("admin").post("/admin/tokens", json={"user": nobody}))["token"]
    assert _ok(lab.api(nobody).get("/queues"))["queues"] == []

    text = lab.tau("queues", TAU_SERVER=lab.base, TAU_TOKEN=lab.tokens["res"], check=True).stdout
    assert "a/main" in text and "b/" not in text and "b-only" not in text
    assert "policy: platform policy" in text and "/srv" not in text
    _ok(lab.api("admin").post("/runs/cancel", json={"runs": [running_b]}))


def test_failed_logins_never_lock_out_a_valid_token(lab: Lab) -> None:
    res_id = lab.token_ids["res"]

    def whoami(token: str) -> httpx.Response:
        return httpx.get(f"{lab.url}/whoami", headers={"Authorization": f"Bearer {token}"})

    # Someone at the same address sends wrong secrets for res's token id ...
    for _ in range(10):
        assert whoami(f"tau_{res_id}_wrong").status_code == 401
    # ... which blocks that pair, and nothing else: the owner and the admin still get in.
    blocked = whoami(f"tau_{res_id}_wrong")
    assert blocked.status_code == 429 and blocked.json()["error"]["code"] == "rate_limited"
    assert res_id not in blocked.text
    assert whoami(lab.tokens["res"]).json()["user"] == "res"
    assert whoami(lab.tokens["admin"]).json()["user"] == "admin"
    assert whoami(f"tau_{lab.token_ids['resb']}_wrong").status_code == 401  # another id
    assert whoami("garbage").status_code == 401  # headers without an id: their own bucket
    assert whoami(f"tau_{res_id}_wrong").status_code == 429  # still blocked


def _submit_audited(lab: Lab, headers: dict[str, str]) -> dict[str, Any]:
    """A refused change (with the address it came from), and its audit entry."""
    resp = lab.api("res").post("/runs/no-such-run/cancel", headers=headers)
    assert resp.status_code == 404
    return lab.audit(actor="res", action="run.cancel")[0]


def test_forwarded_for_is_ignored_without_a_trusted_proxy(lab: Lab) -> None:
    entry = _submit_audited(lab, {"X-Forwarded-For": FORWARDED})
    assert entry["source"] == "127.0.0.1"
    # Nor can a client spread its failures over invented addresses.
    for i in range(10):
        hdr = {"Authorization": "Bearer tau_zz_x", "X-Forwarded-For": f"198.51.100.{i}"}
        assert httpx.get(f"{lab.url}/whoami", headers=hdr).status_code == 401
    hdr = {"Authorization": "Bearer tau_zz_x", "X-Forwarded-For": "198.51.100.99"}
    assert httpx.get(f"{lab.url}/whoami", headers=hdr).status_code == 429


def test_forwarded_for_names_the_client_behind_a_trusted_proxy(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    tau = Tau(home=tmp_path / "home", cwd=work)
    lab = Lab(tau, "--trusted-proxy", "127.0.0.1/32")
    try:
        # The client wrote the left part itself; the proxy (127.0.0.1) appended FORWARDED.
        entry = _submit_audited(lab, {"X-Forwarded-For": f"10.9.9.9, {FORWARDED}"})
        assert entry["source"] == FORWARDED
        assert _submit_audited(lab, {})["source"] == "127.0.0.1"  # no header: the peer
        # Failures count per forwarded client: one client blocked, the next one is not.
        for _ in range(10):
            hdr = {"Authorization": "Bearer tau_zz_x", "X-Forwarded-For": FORWARDED}
            assert httpx.get(f"{lab.url}/whoami", headers=hdr).status_code == 401
        hdr = {"Authorization": "Bearer tau_zz_x", "X-Forwarded-For": FORWARDED}
        assert httpx.get(f"{lab.url}/whoami", headers=hdr).status_code == 429
        hdr["X-Forwarded-For"] = "203.0.113.10"
        assert httpx.get(f"{lab.url}/whoami", headers=hdr).status_code == 401
    finally:
        lab.close()
        tau.stop_server()
        deadline = time.monotonic() + 10
        while (tau.home / "server.json").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
