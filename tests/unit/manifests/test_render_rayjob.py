"""launcher: ray as a KubeRay v1 RayJob: validated against the v1.7.0 CRD (with its CEL
rules), what Kueue's webhook and the operator require, and a golden file."""

from __future__ import annotations

from pathlib import Path

import pytest

from k8s_golden import assert_golden
from k8s_validate import SCHEMAS, validate_object
from taugrid.errors import UsageError
from taugrid.manifests.workloads import JobInput, SecretRef, render_rayjob

GOLDEN = Path(__file__).parent / "golden"
KUBERAY = (SCHEMAS / "kuberay",)


def ray(**kw: object) -> JobInput:
    base: dict[str, object] = {
        "run_id": "tune-9c1d",
        "attempt": 1,
        "workspace": "vision",
        "namespace": "tau-vision",
        "queue": "default",
        "priority_class": "normal",
        "image": "rayproject/ray:2.40.0-py311",
        "command": ["python", "tune.py", "--trials", "8"],
        "env": {"TAU_RUN_ID": "tune-9c1d"},
        "secrets": {"WANDB_API_KEY": SecretRef("tau-secrets-vision", "wandb")},
        "gpus": 1,
        "cpu_millis": 4000,
        "memory_bytes": 16 << 30,
        "nodes": 3,
        "launcher": "ray",
        "timeout_s": 3600,
    }
    base.update(kw)
    return JobInput(**base)  # type: ignore[arg-type]


def test_the_rayjob_validates_against_the_crd_and_matches_its_golden_file() -> None:
    obj = render_rayjob(ray())
    assert validate_object(obj, KUBERAY) == []
    assert_golden(GOLDEN / "rayjob.yaml", obj)


def test_what_kueue_and_kuberay_require() -> None:
    obj = render_rayjob(ray())
    spec = obj["spec"]
    assert spec["shutdownAfterJobFinishes"] is True and spec["suspend"] is True
    assert "clusterSelector" not in spec and "enableInTreeAutoscaling" not in spec["rayClusterSpec"]
    (workers,) = spec["rayClusterSpec"]["workerGroupSpecs"]
    assert workers["groupName"] != "head"
    assert (workers["replicas"], workers["minReplicas"], workers["maxReplicas"]) == (3, 3, 3)
    assert obj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "default"
    assert spec["entrypoint"] == "python tune.py --trials 8"
    assert spec["activeDeadlineSeconds"] == 3600


def test_workers_get_the_runs_resources_and_the_head_no_gpu() -> None:
    cluster = render_rayjob(ray())["spec"]["rayClusterSpec"]
    head = cluster["headGroupSpec"]["template"]["spec"]["containers"][0]
    worker = cluster["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert "nvidia.com/gpu" not in head["resources"].get("limits", {})
    for c in (head, worker):
        names = {e["name"] for e in c["env"]}
        assert {"TAU_RUN_ID", "WANDB_API_KEY"} <= names
        assert "command" not in c  # KubeRay starts Ray in the image


def test_a_name_kuberay_cannot_take_is_refused_before_anything_is_created() -> None:
    with pytest.raises(UsageError, match="cannot name a RayJob"):
        render_rayjob(ray(run_id="t" * 45))  # "t...t-a1" is 48 characters
    with pytest.raises(UsageError, match="cannot name a RayJob"):
        render_rayjob(ray(run_id="9lives"))  # DNS-1035 starts with a letter
    with pytest.raises(UsageError, match="launcher: ray only"):
        render_rayjob(ray(launcher="torchrun"))


def test_the_submitter_pod_is_labelled_as_the_attempts_and_left_to_kuberay() -> None:
    obj = render_rayjob(ray())
    template = obj["spec"]["submitterPodTemplate"]
    assert template["metadata"]["labels"]["taugrid.io/run-id"] == "tune-9c1d"
    assert template["metadata"]["labels"]["taugrid.io/attempt"] == "1"
    (container,) = template["spec"]["containers"]
    assert container["name"] == "ray-job-submitter"
    assert "command" not in container  # KubeRay puts `ray job submit ...` there
    assert container["resources"]["requests"] == {"cpu": "500m", "memory": "200Mi"}
    assert template["spec"]["securityContext"]["runAsNonRoot"] is True
