"""On a shared server one workspace cannot use another's submissions: idempotency keys,
snapshots and reruns stay inside the caller's rights (real server, real tokens)."""

from __future__ import annotations

import hashlib
import io
import tarfile
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from tauproc import Tau

from servicecheck import require_bwrap
from taugrid.domain.fingerprint import spec_hash

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
    "res": ("a", "researcher"),
    "res2": ("a", "researcher"),
    "maint": ("a", "maintainer"),
    "view": ("a", "viewer"),
    "outsider": ("b", "researcher"),
}


def _archive(text: bytes) -> tuple[str, bytes]:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as tar:
        member = tarfile.TarInfo("job.py")
        member.size = len(text)
        tar.addfile(member, io.BytesIO(text))
    data = raw.getvalue()
    return hashlib.sha256(data).hexdigest(), data


class Shared:
    def __init__(self, tau: Tau) -> None:
        require_bwrap()
        self.tau = tau
        info = tau.start_server("--shared")
        self.url = info["url"]
        self.tokens = {"admin": (tau.home / "admin-token").read_text().strip()}
        self.clients: dict[str, httpx.Client] = {}
        admin = self.api("admin")
        _ok(admin.put("/admin/policy", json={"source": "policy.yaml", "text": POLICY}))
        for ws in ("a", "b"):
            _ok(admin.post("/admin/workspaces", json={"name": ws}))
        for user, (ws, role) in MEMBERS.items():
            _ok(admin.post("/admin/users", json={"name": user}))
            _ok(admin.put(f"/admin/workspaces/{ws}/members/{user}", json={"role": role}))
            self.tokens[user] = _ok(admin.post("/admin/tokens", json={"user": user}))["token"]
        self.digest, self.archive = _archive(b"import time; time.sleep(60)\n")

    def api(self, who: str) -> httpx.Client:
        if who not in self.clients:
            self.clients[who] = httpx.Client(
                base_url=f"{self.url}/api/v1",
                headers={"Authorization": f"Bearer {self.tokens[who]}"},
                timeout=30,
            )
        return self.clients[who]

    def upload(self, who: str, ws: str, data: bytes | None = None) -> httpx.Response:
        data = self.archive if data is None else data
        digest = hashlib.sha256(data).hexdigest()
        return self.api(who).put(f"/snapshots/{digest}", params={"workspace": ws}, content=data)

    def has(self, who: str, ws: str) -> int:
        return self.api(who).head(f"/snapshots/{self.digest}", params={"workspace": ws}).status_code

    def body(self, ws: str, name: str = "job", **more: Any) -> dict[str, Any]:
        resolved = {
            "name": name,
            "workspace": ws,
            "queue": "main",
            "command": ["python3", "job.py"],
        }
        return {
            "spec_source": "tau.yaml",
            "file_text": f"workspace: {ws}\nqueue: main\ncommand: [python3, job.py]\n",
            "resolved": resolved,
            "spec_hash": spec_hash(resolved),
            "snapshot_digest": self.digest,
            **more,
        }

    def submit(self, who: str, body: dict[str, Any], key: str | None = None) -> httpx.Response:
        headers = {"Idempotency-Key": key or str(uuid.uuid4())}
        return self.api(who).post("/runs", json=body, headers=headers)

    def names(self) -> list[str]:
        return sorted(r["name"] for r in _ok(self.api("admin").get("/runs"))["runs"])

    def close(self) -> None:
        admin = self.api("admin")
        ids = [r["id"] for r in _ok(admin.get("/runs"))["runs"]]
        if ids:
            admin.post("/runs/cancel", json={"runs": ids})
        for c in self.clients.values():
            c.close()


def _ok(resp: httpx.Response) -> Any:
    assert resp.status_code < 300, (resp.status_code, resp.text)
    return resp.json() if resp.content else None


@pytest.fixture
def shared(tau: Tau) -> Iterator[Shared]:
    s = Shared(tau)
    try:
        yield s
    finally:
        s.close()


def test_idempotency_keys_belong_to_the_caller_and_workspace(shared: Shared) -> None:
    _ok(shared.upload("admin", "a"))
    _ok(shared.upload("admin", "b"))
    key = "ci-job-1234"
    first = shared.submit("res", shared.body("a"), key)
    assert first.status_code == 201, first.text
    run = first.json()["run"]

    # The same caller, workspace, key and request: the first run, nothing new.
    again = shared.submit("res", shared.body("a"), key)
    assert again.status_code == 200 and again.json()["run"]["id"] == run["id"]
    assert again.json()["created"] is False

    # Another caller, or another workspace, with that key: a run of its own. Before, the
    # outsider got res's run (id and submitter) and its own submission was dropped.
    for who, ws in (("outsider", "b"), ("res2", "a"), ("admin", "a"), ("admin", "b")):
        resp = shared.submit(who, shared.body(ws, name=f"by-{who}-{ws}"), key)
        assert resp.status_code == 201, (who, ws, resp.text)
        mine = resp.json()["run"]
        assert mine["id"] != run["id"] and mine["submitter"] == who and mine["workspace"] == ws

    # The same key with a different request: refused, and the message echoes nothing.
    other = shared.submit("res", shared.body("a", name="other-job"), key)
    assert other.status_code == 422, other.text
    err = other.json()["error"]
    assert err["code"] == "idempotency_key_reused" and "different request" in err["message"]
    assert key not in err["message"] and "other-job" not in err["message"]

    # Batch items are scoped the same way; a reused key in a batch refuses the batch.
    items = [
        {**shared.body("a"), "idempotency_key": key},
        {**shared.body("a", name="fresh"), "idempotency_key": "ci-job-5678"},
    ]
    results = _ok(shared.api("res").post("/runs/batch", json={"runs": items}))["results"]
    assert [(r["run"]["id"] == run["id"], r["created"]) for r in results] == [
        (True, False),
        (False, True),
    ]
    items[0] = {**shared.body("a", name="changed"), "idempotency_key": key}
    resp = shared.api("res").post("/runs/batch", json={"runs": items})
    assert resp.status_code == 422 and "runs[0]" in resp.json()["error"]["message"]
    assert shared.names() == sorted(
        ["job", "by-outsider-b", "by-res2-a", "by-admin-a", "by-admin-b", "fresh"]
    )


def test_snapshots_exist_only_for_the_workspaces_they_were_uploaded_for(shared: Shared) -> None:
    # Uploading needs submit rights; the body is not even read otherwise.
    assert shared.upload("view", "a").status_code == 403
    assert shared.upload("outsider", "a").status_code == 404
    assert shared.has("admin", "a") == 404
    _ok(shared.upload("res", "a"))

    # Existence does not leak: only a's readers learn that a has it.
    assert shared.has("res", "a") == 200 and shared.has("view", "a") == 200
    assert shared.has("outsider", "a") == 404  # not a member of a
    assert shared.has("outsider", "b") == 404  # b has no such upload
    assert shared.has("admin", "b") == 404

    # A run in b cannot use a's snapshot until someone with the bytes uploads them for b.
    refused = shared.submit("outsider", shared.body("b"))
    assert refused.status_code == 400 and "was not uploaded" in refused.text
    _ok(shared.upload("outsider", "b"))
    assert shared.has("outsider", "b") == 200
    assert shared.submit("outsider", shared.body("b")).status_code == 201
    stored = sorted(p.name for p in (shared.tau.home / "snapshots").iterdir())
    assert stored == [f"{shared.digest}.tar.gz"]  # content-addressed: one file

    # An archive with a symlink out of the workdir is refused at upload, not at launch.
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as tar:
        link = tarfile.TarInfo("data")
        link.type, link.linkname = tarfile.SYMTYPE, "../../../../etc"
        tar.addfile(link)
    evil = shared.upload("res", "a", raw.getvalue())
    assert evil.status_code == 422 and evil.json()["error"]["code"] == "snapshot_invalid"

    entries = _ok(shared.api("admin").get("/admin/audit", params={"action": "snapshot.upload"}))
    outcomes = sorted(e["outcome"] for e in entries["entries"])
    assert outcomes == sorted(["forbidden", "not_found", "ok", "ok", "snapshot_invalid"])


def test_reruns_need_the_right_to_change_the_run_in_its_workspace(shared: Shared) -> None:
    _ok(shared.upload("admin", "a"))
    _ok(shared.upload("admin", "b"))
    orig = _ok(shared.submit("res", shared.body("a")))["run"]["id"]

    def rerun(who: str, ws: str, ref: str = orig) -> httpx.Response:
        return shared.submit(who, shared.body(ws, name="again", rerun_of=ref))

    forbidden = rerun("res2", "a")  # another researcher's run: as for resume, no
    assert forbidden.status_code == 403, forbidden.text
    assert forbidden.json()["error"]["code"] == "forbidden"
    for who in ("outsider", "admin"):  # a run of another workspace: not found
        resp = rerun(who, "b")
        assert resp.status_code == 404, (who, resp.text)
    assert shared.names() == ["job"]

    own = _ok(rerun("res", "a", ref="job"))["run"]  # a name resolves to the run's id
    by_maint = _ok(rerun("maint", "a"))["run"]
    for run in (own, by_maint):
        detail = _ok(shared.api("admin").get(f"/runs/{run['id']}"))
        assert detail["rerun_of"] == orig

    # `tau rerun` gets the same answer from the server.
    proc = shared.tau("rerun", orig, TAU_SERVER=shared.url, TAU_TOKEN=shared.tokens["res2"])
    assert proc.returncode == 9, proc.stderr
    assert "may not rerun" in proc.stderr and "Traceback" not in proc.stderr
