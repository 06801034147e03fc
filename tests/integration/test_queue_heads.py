"""`tau queues` shows the head of each queue: the first runs waiting, in order, and why;
on a shared server each caller sees only their own workspaces' runs there. Real server,
real CLI."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import httpx
from tauproc import Tau, write_spec

from servicecheck import require_bwrap

PY = sys.executable

# One CPU for everyone: the first run takes it, the others wait in the shared queue.
POLICY = """\
flavors:
  - name: cpu
cluster_queues:
  - name: shared
    resources:
      - flavor: cpu
        quotas: {gpu: 0, cpu: 1, memory: 64Gi}
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


def _heads_settled(get: Any, queue: str, want: int, timeout: float = 30) -> dict[str, Any]:
    """The queue of that name in ``get()`` once ``want`` runs wait there with a reason."""
    deadline = time.monotonic() + timeout
    while True:
        data = get()
        q = next(q for q in data["queues"] if q["name"] == queue)
        if q["pending"] == want and len(q["heads"]) == min(want, 3):
            return dict(q)
        if time.monotonic() > deadline:
            raise AssertionError(f"queue {queue} never settled: {q}")
        time.sleep(0.1)


def test_queues_shows_the_head_of_each_queue_in_order(tau: Tau, tmp_path: Path) -> None:
    tau.start_server("--gpus", "1")
    gate = tmp_path / "gate"
    wait = f"import os, time\nwhile not os.path.exists({str(gate)!r}): time.sleep(0.05)\n"
    tau("run", "--name", "holder", "--gpus", "1", "--", PY, "-c", wait, check=True)
    tau.wait_state("holder", {"RUNNING"})
    ids = [
        tau.json("run", "--name", f"w{i}", "--gpus", "1", "--", "true")["run"]["id"]
        for i in range(4)
    ]

    q = _heads_settled(lambda: tau.json("queues"), "default", 4)
    assert [(h["run_id"], h["position"]) for h in q["heads"]] == [
        (ids[0], 1),
        (ids[1], 2),
        (ids[2], 3),
    ]
    assert {h["reason"] for h in q["heads"]} == {"WaitingForQuota"}
    assert all("1 of 1 in use" in h["message"] for h in q["heads"])
    assert q["heads"][0]["workspace"] == "default"

    text = tau("queues", check=True).stdout
    below = text.split("waiting in default:\n", 1)[1].splitlines()
    assert [line.split()[:3] for line in below[:3]] == [
        ["#1", ids[0], "WaitingForQuota:"],
        ["#2", ids[1], "WaitingForQuota:"],
        ["#3", ids[2], "WaitingForQuota:"],
    ]
    assert below[3] == "  ... 1 more"
    gate.write_text("go")


class SharedLab:
    """A shared server: workspaces a and b feeding one queue, a researcher in each."""

    def __init__(self, tau: Tau) -> None:
        require_bwrap()
        self.tau = tau
        self.base = str(tau.start_server("--shared")["url"])
        self.tokens = {"admin": (tau.home / "admin-token").read_text().strip()}
        with self.api("admin") as admin:
            self._ok(admin.put("/admin/policy", json={"source": "p.yaml", "text": POLICY}))
            for ws in ("a", "b"):
                self._ok(admin.post("/admin/workspaces", json={"name": ws}))
            for user, ws in (("res", "a"), ("resb", "b")):
                self._ok(admin.post("/admin/users", json={"name": user}))
                self._ok(
                    admin.put(f"/admin/workspaces/{ws}/members/{user}", json={"role": "researcher"})
                )
                self.tokens[user] = self._ok(admin.post("/admin/tokens", json={"user": user}))[
                    "token"
                ]

    @staticmethod
    def _ok(resp: httpx.Response) -> Any:
        assert resp.status_code < 300, (resp.status_code, resp.text)
        return resp.json() if resp.content else None

    def api(self, who: str) -> httpx.Client:
        return httpx.Client(
            base_url=f"{self.base}/api/v1",
            headers={"Authorization": f"Bearer {self.tokens[who]}"},
            timeout=30,
        )

    def cli(self, who: str, *args: str, **kw: Any) -> Any:
        return self.tau(*args, TAU_SERVER=self.base, TAU_TOKEN=self.tokens[who], **kw)

    def submit(self, who: str, workspace: str, name: str) -> str:
        spec_dir = self.tau.cwd / name
        write_spec(
            spec_dir,
            f"name: {name}\ncommand: [sleep, '60']\nworkspace: {workspace}\nqueue: main\n"
            "resources: {cpus: 1}\n",
        )
        proc = self.cli(who, "run", "-o", "json", cwd=spec_dir, check=True)
        import json

        return str(json.loads(proc.stdout)["run"]["id"])


def test_queue_heads_show_a_researcher_only_their_workspaces_runs(tau: Tau) -> None:
    lab = SharedLab(tau)
    running = lab.submit("resb", "b", "b-first")
    lab.tau.wait_state(running, {"RUNNING"})
    order = [
        lab.submit("resb", "b", "b-two"),  # 1
        lab.submit("res", "a", "a-one"),  # 2
        lab.submit("res", "a", "a-two"),  # 3
        lab.submit("resb", "b", "b-three"),  # 4
        lab.submit("res", "a", "a-three"),  # 5
    ]

    def queues(who: str) -> Any:
        with lab.api(who) as api:
            return lab._ok(api.get("/queues"))

    everyone = _heads_settled(lambda: queues("admin"), "shared", 5)
    assert [(h["run_id"], h["workspace"], h["position"]) for h in everyone["heads"]] == [
        (order[0], "b", 1),
        (order[1], "a", 2),
        (order[2], "a", 3),
    ]
    mine = next(q for q in queues("res")["queues"] if q["name"] == "shared")
    assert mine["pending"] == 5  # the shared queue's figures stay whole
    assert [(h["run_id"], h["position"]) for h in mine["heads"]] == [
        (order[1], 2),
        (order[2], 3),
        (order[4], 5),  # b's runs are left out, never named; a's keep their real places
    ]
    assert {h["workspace"] for h in mine["heads"]} == {"a"}

    text = lab.cli("res", "queues", check=True).stdout
    assert "waiting in shared:" in text and order[1] in text and order[4] in text
    assert "b-two" not in text and "b-three" not in text and "b-first" not in text
    as_json = lab.cli("res", "queues", "-o", "json", check=True).stdout
    assert order[1] in as_json and "b-two" not in as_json
    with lab.api("admin") as admin:
        lab._ok(admin.post("/runs/cancel", json={"runs": [running, *order]}))
