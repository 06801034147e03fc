"""Secrets belong to a workspace (and optionally to a user), on a real shared server with
real API tokens and the real CLI: isolation between workspaces, who may set what, the
personal-over-workspace order at launch, listings without values, the flat layout moved
into ``default`` at start, and the warning for credentials written inline in ``env``."""

from __future__ import annotations

import hashlib
import json
import sys
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
    "wsadm": ("a", "admin"),
    "maint": ("a", "maintainer"),
    "res": ("a", "researcher"),
    "res2": ("a", "researcher"),
    "view": ("a", "viewer"),
    "outsider": ("b", "researcher"),
}
A_VALUE = "hf_WorkspaceA-secret-value-0001"
RES_VALUE = "hf_ResearcherPersonal-value-0002"
B_VALUE = "hf_WorkspaceB-secret-value-0003"
ALL_VALUES = (A_VALUE, RES_VALUE, B_VALUE)
# Prints a digest of the secret it got (never the secret itself).
PRINT_DIGEST = (
    "import hashlib, os; "
    "print('sha', hashlib.sha256(os.environ['HF_TOKEN'].encode()).hexdigest(), flush=True)"
)


def digest_line(value: str) -> str:
    return f"sha {hashlib.sha256(value.encode()).hexdigest()}"


def need_sandbox() -> None:
    require_bwrap()


class World:
    """A shared server with workspaces a and b, a user per role and their API tokens."""

    def __init__(self, tau: Tau) -> None:
        self.tau = tau
        info = tau.start_server("--shared")
        self.base = str(info["url"])
        self.tokens = {"admin": (tau.home / "admin-token").read_text().strip()}
        self.clients: dict[str, httpx.Client] = {}
        admin = self.api("admin")
        ok(admin.put("/admin/policy", json={"source": "policy.yaml", "text": POLICY}))
        for ws in ("a", "b"):
            ok(admin.post("/admin/workspaces", json={"name": ws}))
        for user, (ws, role) in MEMBERS.items():
            ok(admin.post("/admin/users", json={"name": user}))
            ok(admin.put(f"/admin/workspaces/{ws}/members/{user}", json={"role": role}))
            self.tokens[user] = ok(admin.post("/admin/tokens", json={"user": user}))["token"]

    def api(self, who: str) -> httpx.Client:
        if who not in self.clients:
            self.clients[who] = httpx.Client(
                base_url=f"{self.base}/api/v1",
                headers={"Authorization": f"Bearer {self.tokens[who]}"},
                timeout=30,
            )
        return self.clients[who]

    def cli(self, who: str, *args: str, input_text: str | None = None) -> Any:
        """The real ``tau`` CLI, authenticated as ``who`` with their API token."""
        return self.tau(
            *args, input_text=input_text, TAU_SERVER=self.base, TAU_TOKEN=self.tokens[who]
        )

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


def ok(resp: httpx.Response) -> Any:
    assert resp.status_code < 300, (resp.status_code, resp.text)
    return resp.json() if resp.content else None


def put(world: World, who: str, ref: str, value: str, **params: str) -> httpx.Response:
    return world.api(who).put(f"/secrets/{ref}", params=params, json={"value": value})


def listed(world: World, who: str, ws: str) -> list[tuple[str, str, str | None]]:
    resp = world.api(who).get("/secrets", params={"workspace": ws})
    body = ok(resp)
    assert not any(v in resp.text for v in ALL_VALUES)
    return [(s["ref"], s["scope"], s["owner"]) for s in body["secrets"]]


def test_each_role_manages_secrets_with_its_own_token(world: World) -> None:
    # Allowed: maintainers and workspace admins set the workspace's secrets; researchers
    # their personal ones; a platform admin's API token anywhere.
    assert put(world, "maint", "hf%2Ftoken", A_VALUE, workspace="a").status_code == 204
    assert put(world, "wsadm", "wandb", "w-value", workspace="a").status_code == 204
    assert world.api("wsadm").delete("/secrets/wandb", params={"workspace": "a"}).status_code == 204
    mine = {"workspace": "a", "scope": "personal"}
    assert put(world, "res", "hf%2Ftoken", RES_VALUE, **mine).status_code == 204
    assert put(world, "admin", "hf%2Ftoken", B_VALUE, workspace="b").status_code == 204

    # Refused inside the workspace: 403 with what to do instead; the value never echoed.
    resp = put(world, "res", "hf%2Ftoken", "res-tries-shared", workspace="a")
    assert resp.status_code == 403, resp.text
    assert resp.json()["error"]["code"] == "forbidden"
    assert "tau secret set hf/token --workspace a --personal" in resp.json()["error"]["message"]
    assert "res-tries-shared" not in resp.text
    for params in ({"workspace": "a"}, mine):
        resp = put(world, "view", "hf%2Ftoken", "viewer-tries", **params)
        assert (resp.status_code, resp.json()["error"]["code"]) == (403, "forbidden"), params
        assert "viewer-tries" not in resp.text
    assert world.api("view").get("/secrets", params={"workspace": "a"}).status_code == 403
    resp = world.api("res").delete("/secrets/hf%2Ftoken", params={"workspace": "a"})
    assert resp.status_code == 403

    # Outside it: 404, answered exactly as for a workspace that does not exist.
    for ws in ("a", "zzz"):
        resp = put(world, "outsider", "hf%2Ftoken", "outsider-tries", workspace=ws)
        assert resp.status_code == 404
        assert resp.json()["error"] == {
            "code": "not_found",
            "message": f"workspace '{ws}' does not exist",
        }
        assert world.api("outsider").get("/secrets", params={"workspace": ws}).status_code == 404
        resp = world.api("outsider").delete("/secrets/hf%2Ftoken", params={"workspace": ws})
        assert resp.status_code == 404
    # Without a workspace the old paths mean `default`, where none of them is a member.
    assert put(world, "maint", "x", "v").status_code == 404

    # Listings: references, scope and owner, never values; personal refs to their owner.
    assert listed(world, "res", "a") == [
        ("hf/token", "personal", "res"),
        ("hf/token", "workspace", None),
    ]
    assert listed(world, "res2", "a") == [("hf/token", "workspace", None)]
    assert listed(world, "maint", "a") == [("hf/token", "workspace", None)]
    assert listed(world, "admin", "a") == [("hf/token", "workspace", None)]
    assert listed(world, "admin", "b") == [("hf/token", "workspace", None)]
    assert listed(world, "outsider", "b") == [("hf/token", "workspace", None)]
    # Values are where the store keeps them, each once.
    store = world.tau.home / "secrets"
    assert (store / "a" / "hf@token").read_text() == A_VALUE
    assert (store / "a" / "~users" / "res" / "hf@token").read_text() == RES_VALUE
    assert (store / "b" / "hf@token").read_text() == B_VALUE

    # A maintainer cannot reach a researcher's personal secret: scope=personal is their own.
    resp = world.api("maint").delete(
        "/secrets/hf%2Ftoken", params={"workspace": "a", "scope": "personal"}
    )
    assert resp.status_code == 404
    assert (store / "a" / "~users" / "res" / "hf@token").exists()

    # Every set and delete is audited, allowed or refused, without the value.
    resp = world.api("admin").get("/admin/audit", params={"limit": 200})
    entries = [e for e in ok(resp)["entries"] if e["action"].startswith("secret.")]
    assert not any(v in resp.text for v in (*ALL_VALUES, "res-tries-shared", "viewer-tries"))
    # What was set is named by target and scope (detail); a refusal's detail is why.
    seen = {(e["actor"], e["action"], e["workspace"], e["target"], e["outcome"]) for e in entries}
    assert {
        ("maint", "secret.set", "a", "hf/token", "ok"),
        ("wsadm", "secret.delete", "a", "wandb", "ok"),
        ("res", "secret.set", "a", "hf/token", "ok"),
        ("admin", "secret.set", "b", "hf/token", "ok"),
        ("res", "secret.set", "a", "hf/token", "forbidden"),
        ("view", "secret.set", "a", "hf/token", "forbidden"),
        ("outsider", "secret.set", "a", "hf/token", "not_found"),
        ("res", "secret.delete", "a", "hf/token", "forbidden"),
    } <= seen
    scopes = {(e["actor"], e["detail"]) for e in entries if e["outcome"] == "ok"}
    assert {("maint", "workspace"), ("res", "personal"), ("admin", "workspace")} <= scopes


def test_the_cli_with_api_tokens(world: World) -> None:
    proc = world.cli("res", "secret", "set", "hf/token", "--workspace", "a", input_text="v1")
    assert proc.returncode == 9, proc.stderr  # forbidden
    assert "--personal" in proc.stderr and "v1" not in proc.stderr
    proc = world.cli(
        "res", "secret", "set", "hf/token", "--workspace", "a", "--personal", input_text=RES_VALUE
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "secret hf/token set (personal) in workspace a\n"
    proc = world.cli("maint", "secret", "set", "hf/token", "--workspace", "a", input_text=A_VALUE)
    assert proc.returncode == 0, proc.stderr
    table = world.cli("res", "secret", "list", "--workspace", "a").stdout.splitlines()
    assert table[0].split() == ["REF", "SCOPE", "OWNER", "UPDATED", "AGE"]
    assert [line.split()[:3] for line in table[1:]] == [
        ["hf/token", "personal", "res"],
        ["hf/token", "workspace", "-"],
    ]
    as_json = json.loads(
        world.cli("res2", "secret", "list", "--workspace", "a", "-o", "json").stdout
    )
    assert as_json["workspace"] == "a"
    assert [(s["ref"], s["scope"]) for s in as_json["secrets"]] == [("hf/token", "workspace")]
    proc = world.cli("outsider", "secret", "list", "--workspace", "a")
    assert proc.returncode == 5 and "workspace 'a' does not exist" in proc.stderr
    proc = world.cli("view", "secret", "list", "--workspace", "a")
    assert proc.returncode == 9
    proc = world.cli("res", "secret", "delete", "hf/token", "--workspace", "a", "--personal")
    assert proc.returncode == 0, proc.stderr
    assert listed(world, "res", "a") == [("hf/token", "workspace", None)]


def test_runs_get_their_workspaces_secret_and_the_submitters_first(world: World) -> None:
    need_sandbox()
    assert put(world, "maint", "hf%2Ftoken", A_VALUE, workspace="a").status_code == 204
    mine = {"workspace": "a", "scope": "personal"}
    assert put(world, "res", "hf%2Ftoken", RES_VALUE, **mine).status_code == 204
    write_spec(
        world.tau.cwd,
        f"name: leak\ncommand: [{sys.executable!r}, -c, {PRINT_DIGEST!r}]\nqueue: main\n"
        "secrets: {HF_TOKEN: hf/token}\n",
    )
    # Workspace b names the same reference: refused as not set there, nothing created.
    proc = world.cli("outsider", "run", "--workspace", "b")
    assert proc.returncode == 2, proc.stderr
    assert "secret 'hf/token' is not set in workspace 'b'" in proc.stderr
    assert "tau secret set hf/token --workspace b --personal" in proc.stderr
    assert ok(world.api("admin").get("/runs", params={"workspace": "b"}))["runs"] == []

    runs = {}
    for who in ("res", "res2"):
        proc = world.cli(who, "run", "--workspace", "a", "-o", "json")
        assert proc.returncode == 0, proc.stderr
        runs[who] = json.loads(proc.stdout)["run"]["id"]
    for who, value in (("res", RES_VALUE), ("res2", A_VALUE)):
        done = world.tau.wait_state(runs[who], {"SUCCEEDED", "FAILED"})
        assert done["state"] == "SUCCEEDED", done["events"]
        logs = world.tau("logs", runs[who], check=True).stdout
        assert digest_line(value) in logs, (who, logs)

    # The same spec in b, once b has its own secret, gets b's value and nothing of a's.
    assert put(world, "admin", "hf%2Ftoken", B_VALUE, workspace="b").status_code == 204
    proc = world.cli("outsider", "run", "--workspace", "b", "-o", "json")
    assert proc.returncode == 0, proc.stderr
    rid = json.loads(proc.stdout)["run"]["id"]
    assert world.tau.wait_state(rid, {"SUCCEEDED", "FAILED"})["state"] == "SUCCEEDED"
    assert digest_line(B_VALUE) in world.tau("logs", rid, check=True).stdout
    launch = next((world.tau.home / "runs" / rid / "attempts").glob("*/launch.json"))
    assert json.loads(launch.read_text())["secret_files"] == {
        "HF_TOKEN": str(world.tau.home / "secrets" / "b" / "hf@token")
    }


def test_nested_json_bodies_get_a_json_error(world: World) -> None:
    for who, params in (
        ("res", {"workspace": "a", "scope": "personal"}),
        ("admin", {"workspace": "b"}),
    ):
        for body in ("[" * 50 + "]" * 50, "[" * 100_000 + "]" * 100_000):
            resp = world.api(who).put(
                "/secrets/k",
                params=params,
                content=body,
                headers={"Content-Type": "application/json"},
            )
            assert resp.status_code == 400, resp.text[:200]
            assert resp.json()["error"]["code"] == "usage"


def test_flat_secrets_move_into_default_at_start(tau: Tau) -> None:
    """A store left by the version before workspaces: `tau secret set hf/token` then a
    run in `default` keeps working after the upgrade."""
    flat = tau.home / "secrets"
    flat.mkdir(parents=True, mode=0o700)
    (flat / "hf@token").write_text(A_VALUE)
    (flat / "wandb").write_text("w-value")
    for p in flat.iterdir():
        p.chmod(0o600)
    tau.start_server()
    assert sorted(p.name for p in flat.iterdir()) == ["default"]
    listing = tau.json("secret", "list")
    assert listing["workspace"] == "default"
    assert [(s["ref"], s["scope"]) for s in listing["secrets"]] == [
        ("hf/token", "workspace"),
        ("wandb", "workspace"),
    ]
    write_spec(
        tau.cwd,
        f"name: old\ncommand: [{sys.executable!r}, -c, {PRINT_DIGEST!r}]\n"
        "secrets: {HF_TOKEN: hf/token}\n",
    )
    rid = tau.json("run")["run"]["id"]
    assert tau.wait_state(rid, {"SUCCEEDED", "FAILED"})["state"] == "SUCCEEDED"
    assert digest_line(A_VALUE) in tau("logs", rid, check=True).stdout
    # Once: a restart finds nothing more to move and changes nothing.
    tau.stop_server()
    tau.start_server()
    assert sorted(p.name for p in flat.iterdir()) == ["default"]
    assert (flat / "default" / "hf@token").read_text() == A_VALUE


def test_tau_run_warns_about_credentials_inline_in_env(tau: Tau) -> None:
    token = "hf_" + "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dE3f"
    tau.start_server()
    write_spec(
        tau.cwd,
        "name: inline\ncommand: 'true'\n"
        f"env: {{LR: '0.1', HF_TOKEN: {token}, TOKENIZERS_PARALLELISM: 'false'}}\n",
    )
    proc = tau("run")
    assert proc.returncode == 0, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1, proc.stderr
    assert warnings[0].startswith("warning: env.HF_TOKEN looks like a credential")
    assert "secrets: {HF_TOKEN: hf-token}" in warnings[0]
    assert "tau secret set hf-token --workspace default" in warnings[0]
    assert token not in proc.stderr + proc.stdout
    assert token[:10] not in proc.stderr
    answer = json.loads(tau("run", "-o", "json", "--set", f"env.RUN={uuid.uuid4().hex}").stdout)
    assert answer["created"] is True and len(answer["warnings"]) == 1
    assert token not in json.dumps(answer["warnings"])
    # The run is accepted all the same; a clean spec gets no warning.
    assert tau.json("status", answer["run"]["id"])["state"] in {
        "QUEUED",
        "ADMITTED",
        "RUNNING",
        "SUCCEEDED",
    }
    write_spec(tau.cwd, "name: clean\ncommand: 'true'\nenv: {LR: '0.1'}\n")
    proc = tau("run")
    assert proc.returncode == 0 and "warning:" not in proc.stderr, proc.stderr


LOCAL_POLICY = """\
flavors:
  - name: cpu
cluster_queues:
  - name: shared
    resources:
      - flavor: cpu
        quotas: {gpu: 0, cpu: 64, memory: 64Gi}
workspaces:
  - name: default
    local_queues: [{name: default, cluster_queue: shared}]
  - name: b
    local_queues: [{name: default, cluster_queue: shared}]
priority_classes:
  - {name: normal, value: 1000, default: true}
"""


def test_a_secret_set_as_before_reaches_only_default(tau: Tau) -> None:
    """The finding: one store per server, so a run of another workspace naming `hf/token`
    received its value. Set as always (`tau secret set hf/token`), it is default's."""
    tau.start_server()
    write_spec(tau.cwd, LOCAL_POLICY, "policy.yaml")
    tau("admin", "policy", "apply", "policy.yaml", check=True)
    tau("secret", "set", "hf/token", input_text=A_VALUE, check=True)
    write_spec(
        tau.cwd,
        f"name: leak\ncommand: [{sys.executable!r}, -c, {PRINT_DIGEST!r}]\n"
        "secrets: {HF_TOKEN: hf/token}\n",
    )
    proc = tau("run", "--workspace", "b")
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "secret 'hf/token' is not set in workspace 'b'" in proc.stderr
    assert "tau secret set hf/token --workspace b" in proc.stderr
    assert tau.json("list")["runs"] == []
    rid = tau.json("run")["run"]["id"]  # default: the spec's workspace
    assert tau.wait_state(rid, {"SUCCEEDED", "FAILED"})["state"] == "SUCCEEDED"
    assert digest_line(A_VALUE) in tau("logs", rid, check=True).stdout
