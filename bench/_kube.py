"""Shared pieces of the Kubernetes executor's benchmarks: the emulator (the test harness's
kmock on loopback, tests/kube_emulator.py), a realistic launch request, an executor, the
objects it renders, and a private cluster-mode server.

The launch request is built as ``server/launching.py`` builds it for the attempt starter
(``launch_request`` from a run row with its resolved spec, the pod's workload paths,
no placement yet: the engine launches a queued run's attempt before Kueue admits it),
the policy is the built-in default (``taugrid.policy.default_policy``, no GPUs as on a
cluster server) and the target ``ClusterTarget()``'s defaults.
"""

from __future__ import annotations

import copy
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kmock._internal.aiobus import Bus

from bench._common import REPO, BenchServer
from taugrid.executors.kubernetes.artifacts import PodArtifacts
from taugrid.executors.kubernetes.client import JsonObject, ObjectList, ObjectRef, WatchEvent
from taugrid.executors.kubernetes.executor import KubernetesExecutor
from taugrid.manifests.plan import ClusterTarget
from taugrid.policy import default_policy
from taugrid.policy.models import Policy
from taugrid.ports.artifacts import ArtifactStore
from taugrid.ports.executor import AttemptKey, LaunchRequest, Placement
from taugrid.server.launching import launch_request
from taugrid.spec import TauSpec
from taugrid.spec.loader import resolved_data

sys.path.insert(0, str(REPO / "tests"))
from kube_emulator import KubeEmulator, resource_of

__all__ = ["KubeEmulator", "resource_of"]

CODE_KEY = b"k" * 32
DIGEST = "d" * 64
JOB = ("batch/v1", "Job")
POD = ("v1", "Pod")
WORKLOAD = ("kueue.x-k8s.io/v1beta2", "Workload")
# What tests/integration/kubernetes/test_cluster_runs.py submits: a training command in
# an image, a CPU and a GiB, two restarts.
SPEC: dict[str, Any] = {
    "name": "train",
    "image": "python:3.12-slim",
    "command": ["python", "train.py"],
    "resources": {"cpus": 1, "memory": "1Gi"},
    "restart": {"max": 2},
}


def policy() -> Policy:
    """The built-in policy of a cluster server (no GPUs of its own, one default queue)."""
    return default_policy(0, None, 8000, 32 << 30, ["default"])


def run_row(run_id: str) -> dict[str, Any]:
    """The parts of a run row ``launch_request`` reads."""
    return {
        "id": run_id,
        "name": "train",
        "workspace": "default",
        "spec_resolved": resolved_data(TauSpec.model_validate(SPEC)),
        "env_summary": {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"},
        "snapshot_digest": DIGEST,
    }


class _NoSnapshots:
    """PodArtifacts' inner store: only its workload paths are asked for here."""


def request(run_id: str, attempt: int = 0) -> LaunchRequest:
    """The launch of a queued run's attempt, as the attempt starter builds it."""
    key = AttemptKey(run_id, attempt)
    inner: ArtifactStore = _NoSnapshots()  # type: ignore[assignment]
    return launch_request(
        run_row(run_id),
        attempt,
        Placement.from_record({}),  # launched before admission: no attempt row yet
        PodArtifacts(inner).workload_paths(key),
        None,  # PodArtifacts finds no resume point: the pod's SDK chooses
        {},
        None,
    )


def executor(client: Any, state_dir: Path, *, ray: bool = True) -> KubernetesExecutor:
    return KubernetesExecutor(client, ClusterTarget(), policy, CODE_KEY, state_dir, ray=ray)


class RecordingClient:
    """A KubeClient that only records what is created (in order) and answers it back:
    what ``KubernetesExecutor.launch`` would send, without a cluster."""

    def __init__(self) -> None:
        self.created: list[JsonObject] = []

    def create(self, obj: JsonObject) -> JsonObject:
        self.created.append(copy.deepcopy(obj))
        return obj

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        labels: dict[str, str] | None = None,
    ) -> ObjectList:
        return ObjectList([], None)

    def watch(self, *args: Any, **kw: Any) -> Iterator[WatchEvent]:
        return iter(())

    def delete(self, ref: ObjectRef, *, propagation: str = "Foreground") -> bool:
        return True

    def close(self) -> None:
        pass


def rendered_objects(run_ids: list[str], state_dir: Path) -> list[list[JsonObject]]:
    """The objects ``launch`` creates for each run's attempt 0, in creation order (the
    code token's Secret, then the Job), captured from a real launch with a recording
    client."""
    rec = RecordingClient()
    ex = executor(rec, state_dir)
    out = []
    for run_id in run_ids:
        rec.created = []
        ex.launch(request(run_id))
        out.append(rec.created)
    return out


class _StampedBus(Bus[Any]):
    """The emulator's event bus of one kind, noting when each object was first ADDED."""

    seen: dict[str, float]

    async def put(self, *items: Any) -> None:
        now = time.perf_counter()
        for item in items:
            if isinstance(item, dict) and item.get("type") == "ADDED":
                self.seen.setdefault(str(item["object"]["metadata"]["name"]), now)
        await super().put(*items)


def job_added_times(emulator: KubeEmulator) -> dict[str, float]:
    """``perf_counter()`` at which each Job was stored and its ADDED event published by
    the emulator (by name), noted on the emulator's own event loop: when the Job became
    visible to anyone watching or reading the cluster. Call before anything watches Jobs."""
    assert emulator.emulator is not None
    bus = _StampedBus()
    bus.seen = {}
    emulator.emulator._buses[resource_of(*JOB)] = bus
    return bus.seen


class ClusterServer(BenchServer):
    """A private ``python -m taugrid.server --executor kubernetes --kubeconfig K``, as
    tests/integration/kubernetes/test_cluster_runs.py starts one, on a fresh home."""

    def __init__(self, name: str, emulator: KubeEmulator) -> None:
        super().__init__(name)
        self.kubeconfig = emulator.write_kubeconfig(self.home / "kubeconfig")

    def server_args(self) -> list[str]:
        return ["--executor", "kubernetes", "--kubeconfig", str(self.kubeconfig)]

    def start(self, timeout: float = 60.0) -> None:
        super().start(timeout)  # a cluster server first lists the cluster


# -- a live attempt's objects, as the Job controller, the kubelet and Kueue write them ------
def now_rfc3339(seq: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(1.8e9 + seq)) + "Z"


def pod_of(job: dict[str, Any]) -> dict[str, Any]:
    meta = job["metadata"]
    template = job["spec"]["template"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{meta['name']}-xyz12",
            "namespace": meta["namespace"],
            "labels": dict(template["metadata"]["labels"]),
            "ownerReferences": [
                {"kind": "Job", "name": meta["name"], "uid": "uid-" + meta["name"]}
            ],
        },
        "spec": copy.deepcopy(template["spec"]),
        "status": pod_status(0),
    }


def pod_status(seq: int) -> dict[str, Any]:
    ready = "True" if seq % 2 == 0 else "False"
    at = now_rfc3339(seq)
    return {
        "phase": "Running",
        "startTime": now_rfc3339(0),
        "conditions": [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Ready", "status": ready, "lastProbeTime": at, "lastTransitionTime": at},
        ],
        "initContainerStatuses": [
            {"name": "fetch-code", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}
        ],
        "containerStatuses": [
            {
                "name": "workload",
                "ready": ready == "True",
                "restartCount": 0,
                "state": {"running": {"startedAt": now_rfc3339(0)}},
            }
        ],
    }


def workload_of(job: dict[str, Any]) -> dict[str, Any]:
    meta = job["metadata"]
    return {
        "apiVersion": WORKLOAD[0],
        "kind": WORKLOAD[1],
        "metadata": {
            "name": f"job-{meta['name']}-1a2b3",
            "namespace": meta["namespace"],
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": meta["name"],
                    "uid": "uid-" + meta["name"],
                    "controller": True,
                }
            ],
        },
        "spec": {"queueName": meta["labels"].get("kueue.x-k8s.io/queue-name")},
        "status": workload_status(0),
    }


def workload_status(seq: int) -> dict[str, Any]:
    ready = "True" if seq % 2 == 0 else "False"
    at = now_rfc3339(seq)
    return {
        "conditions": [
            {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"},
            {"type": "Admitted", "status": "True", "reason": "Admitted"},
            {"type": "PodsReady", "status": ready, "reason": "PodsReady", "lastTransitionTime": at},
        ],
        "admission": {
            "clusterQueue": "default",
            "podSetAssignments": [{"name": "main", "flavors": {"cpu": "local"}}],
        },
    }
