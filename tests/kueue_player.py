"""The test plays Kueue, the Job controller and the kubelet on the emulator, step by step,
as ``shared/reference/kueue-kuberay-contract.md`` describes them:

- Kueue: makes a Workload for each Job it manages (owned by the Job; its name is not
  computed by anyone), reserves quota and admits it (conditions, ``status.admission``),
  unsuspends the Job; on eviction sets ``Evicted``/``Preempted``, suspends the Job;
- the Job controller: makes the pods of an unsuspended Job (labels from its template,
  the completion index of an Indexed Job), deletes them when the Job is suspended or
  deleted (foreground deletion), and sets ``Complete``/``Failed``;
- the kubelet: pod phases, container states, exit codes, OOMKilled, logs.

The emulator gives objects no uid or resourceVersion and ignores label selectors; the
player filters by labels itself and never relies on uids.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kube_emulator import KubeEmulator

JOB = ("batch/v1", "Job")
POD = ("v1", "Pod")
WORKLOAD = ("kueue.x-k8s.io/v1beta2", "Workload")
INDEX = "batch.kubernetes.io/job-completion-index"


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def ours(obj: dict[str, Any]) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return labels.get("taugrid.io/managed-by") == "taugrid"


def wait_for(what: str, check: Callable[[], Any], timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


class KueuePlayer:
    def __init__(self, emulator: KubeEmulator) -> None:
        self.emu = emulator
        self.server_args: tuple[str, ...] = ()  # how the test started its tau server

    # -- reading ---------------------------------------------------------------------------
    def jobs(self) -> list[dict[str, Any]]:
        return [j for j in self.emu.objects(*JOB) if ours(j)]

    def job(self, name: str, namespace: str = "default") -> dict[str, Any] | None:
        return self.emu.get(*JOB, namespace, name)

    def wait_job(self, run_id: str, attempt: int = 0, timeout: float = 20.0) -> dict[str, Any]:
        name = f"{run_id}-a{attempt}"
        return wait_for(
            f"Job {name}",
            lambda: next((j for j in self.jobs() if j["metadata"]["name"] == name), None),
            timeout,
        )

    def pods(self, job: dict[str, Any]) -> list[dict[str, Any]]:
        labels = job["spec"]["template"]["metadata"]["labels"]
        return [
            p
            for p in self.emu.objects(*POD)
            if p["metadata"].get("namespace") == job["metadata"]["namespace"]
            and all((p["metadata"].get("labels") or {}).get(k) == v for k, v in labels.items())
        ]

    # -- Kueue -----------------------------------------------------------------------------
    def workload_name(self, job: dict[str, Any]) -> str:
        return f"job-{job['metadata']['name']}-1a2b3"  # Kueue's shape; nobody computes it

    def make_workload(self, job: dict[str, Any], reason: str = "WaitingForQuota") -> None:
        meta = job["metadata"]
        self.emu.put(
            {
                "apiVersion": WORKLOAD[0],
                "kind": WORKLOAD[1],
                "metadata": {
                    "name": self.workload_name(job),
                    "namespace": meta["namespace"],
                    "ownerReferences": [
                        {
                            "apiVersion": "batch/v1",
                            "kind": "Job",
                            "name": meta["name"],
                            "uid": meta.get("uid") or "uid-" + meta["name"],
                            "controller": True,
                        }
                    ],
                },
                "spec": {"queueName": meta["labels"].get("kueue.x-k8s.io/queue-name")},
                "status": {
                    "conditions": [
                        {
                            "type": "QuotaReserved",
                            "status": "False",
                            "reason": reason,
                            "message": "couldn't assign flavors to pod set main: "
                            "insufficient unused quota for nvidia.com/gpu",
                        }
                    ]
                },
            }
        )

    def admit(self, job: dict[str, Any], flavor: str = "default", cq: str = "cq") -> None:
        meta = job["metadata"]
        self.emu.patch_status(
            *WORKLOAD,
            meta["namespace"],
            self.workload_name(job),
            {
                "conditions": [
                    {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"},
                    {"type": "Admitted", "status": "True", "reason": "Admitted"},
                ],
                "admission": {
                    "clusterQueue": cq,
                    "podSetAssignments": [{"name": "main", "flavors": {"cpu": flavor}}],
                },
            },
        )
        self.emu.patch(*JOB, meta["namespace"], meta["name"], {"spec": {"suspend": False}})

    def evict(self, job: dict[str, Any], reason: str = "Preempted") -> None:
        meta = job["metadata"]
        conditions = [
            {"type": "QuotaReserved", "status": "False", "reason": "Pending"},
            {"type": "Admitted", "status": "False", "reason": "NoReservation"},
            {
                "type": "Evicted",
                "status": "True",
                "reason": reason,
                "message": "Preempted to accommodate a workload (UID: x) due to prioritization",
            },
        ]
        if reason == "Preempted":
            conditions.append(
                {"type": "Preempted", "status": "True", "reason": "InClusterQueue", "message": ""}
            )
        self.emu.patch_status(
            *WORKLOAD, meta["namespace"], self.workload_name(job), {"conditions": conditions}
        )
        self.emu.patch(*JOB, meta["namespace"], meta["name"], {"spec": {"suspend": True}})
        for pod in self.pods(job):
            self.emu.delete(*POD, pod["metadata"]["namespace"], pod["metadata"]["name"])

    # -- the Job controller ------------------------------------------------------------------
    def make_pods(self, job: dict[str, Any], node: str | None = None) -> list[dict[str, Any]]:
        """The Job controller's pods (bound to ``node`` as the scheduler would)."""
        meta = job["metadata"]
        n = int(job["spec"].get("parallelism") or 1)
        indexed = job["spec"].get("completionMode") == "Indexed"
        made = []
        for i in range(n):
            name = f"{meta['name']}-{i}-abcde" if indexed else f"{meta['name']}-xyz12"
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": meta["namespace"],
                    "labels": dict(job["spec"]["template"]["metadata"]["labels"]),
                    "annotations": {INDEX: str(i)} if indexed else {},
                    "ownerReferences": [{"kind": "Job", "name": meta["name"]}],
                },
                "spec": {**job["spec"]["template"]["spec"], **({"nodeName": node} if node else {})},
                "status": {"phase": "Pending"},
            }
            made.append(self.emu.put(pod))
        return made

    def collect_garbage(self) -> int:
        """Pods whose Job is gone go too (the garbage collector of a foreground delete)."""
        gone = 0
        for pod in self.emu.objects(*POD):
            owner = ((pod["metadata"].get("ownerReferences") or [{}])[0]).get("name")
            if owner and self.job(owner, pod["metadata"]["namespace"]) is None:
                self.emu.delete(*POD, pod["metadata"]["namespace"], pod["metadata"]["name"])
                gone += 1
        return gone

    def finish_job(self, job: dict[str, Any], *, failed: str | None = None) -> None:
        meta = job["metadata"]
        if failed is None:
            cond = {"type": "Complete", "status": "True", "reason": "Completed"}
        else:
            cond = {"type": "Failed", "status": "True", "reason": failed, "message": failed}
        self.emu.patch_status(
            *JOB,
            meta["namespace"],
            meta["name"],
            {
                "startTime": now_rfc3339(),
                "completionTime": now_rfc3339(),
                "conditions": [cond],
            },
        )

    # -- the kubelet ----------------------------------------------------------------------
    def pod_running(self, pod: dict[str, Any]) -> None:
        self._pod_status(
            pod,
            {
                "phase": "Running",
                "startTime": now_rfc3339(),
                "conditions": [{"type": "PodScheduled", "status": "True"}],
                "containerStatuses": [
                    {"name": "workload", "state": {"running": {"startedAt": now_rfc3339()}}}
                ],
            },
        )

    def pod_waiting(self, pod: dict[str, Any], reason: str, message: str = "") -> None:
        self._pod_status(
            pod,
            {
                "phase": "Pending",
                "conditions": [{"type": "PodScheduled", "status": "True"}],
                "containerStatuses": [
                    {
                        "name": "workload",
                        "state": {"waiting": {"reason": reason, "message": message}},
                    }
                ],
            },
        )

    def pod_exited(self, pod: dict[str, Any], code: int, reason: str = "Completed") -> None:
        self._pod_status(
            pod,
            {
                "phase": "Succeeded" if code == 0 else "Failed",
                "startTime": now_rfc3339(),
                "containerStatuses": [
                    {
                        "name": "workload",
                        "state": {"terminated": {"exitCode": code, "reason": reason}},
                    }
                ],
            },
        )

    def _pod_status(self, pod: dict[str, Any], status: dict[str, Any]) -> None:
        meta = pod["metadata"]
        live = self.emu.get(*POD, meta["namespace"], meta["name"]) or pod
        self.emu.put({**live, "status": status})

    # -- the kubelet running one of TauGrid's own containers ------------------------------
    def run_helper(
        self,
        pod: dict[str, Any],
        container: str,
        *,
        volumes: Mapping[str, Path],
        server_url: str,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.Popen[str]:
        """Start one of the pod's ``python -m taugrid.podhelper ...`` containers as the
        kubelet would: its environment with each ``secretKeyRef`` read from the Secret in
        the emulator, each mount (the path the pod sees) at a directory here, and the
        server's in-cluster address resolved to ``server_url``. ``env`` overrides (a
        test's shorter interval)."""
        spec = pod["spec"]
        c = next(
            x for x in spec.get("initContainers", []) + spec["containers"] if x["name"] == container
        )
        namespace = pod["metadata"]["namespace"]
        resolved: dict[str, str] = {}
        for e in c.get("env", []):
            if "value" in e:
                resolved[e["name"]] = e["value"]
                continue
            ref = e["valueFrom"]["secretKeyRef"]
            secret = self.emu.get("v1", "Secret", namespace, ref["name"])
            assert secret is not None, f"no Secret {ref['name']} for {container}"
            if ref["key"] in (secret.get("stringData") or {}):
                resolved[e["name"]] = secret["stringData"][ref["key"]]
            else:
                resolved[e["name"]] = base64.b64decode(secret["data"][ref["key"]]).decode()
        for name, value in list(resolved.items()):
            for mount, host in volumes.items():
                if value == mount or value.startswith(mount + "/"):
                    resolved[name] = str(host) + value[len(mount) :]
            if "://" in value and "/api/v1/" in value:  # the Service's DNS name
                resolved[name] = server_url.rstrip("/") + "/api/v1/" + value.split("/api/v1/", 1)[1]
        argv = list(c["command"])
        assert argv[:3] == ["python", "-m", "taugrid.podhelper"], argv
        return subprocess.Popen(
            [sys.executable, *argv[1:]],
            env={"PATH": os.environ.get("PATH", ""), **resolved, **(env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
