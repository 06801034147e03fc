"""A workspace whose runs keep checkpoints and outputs in object storage
(``storage.url``): the pod gets an emptyDir at /tau/run, the resume point's download
before the workload, and the sidecar that uploads; credentials only by reference."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from k8s_golden import assert_golden
from k8s_validate import SCHEMAS, require_schemas, validate_object
from taugrid.manifests.plan import AttemptIdentity, ClusterTarget, attempt_input, place
from taugrid.manifests.plan import render_attempt as render
from taugrid.policy.loader import load_policy_text
from taugrid.spec.models import TauSpec

GOLDEN = Path(__file__).parent / "golden"
TARGET = ClusterTarget(namespace_prefix="tau-", helper_image="ghcr.io/taugrid/taugrid:test")

POLICY = """\
flavors: [{name: gpu, gpu_type: h100, gpus_per_node: 8}]
cluster_queues:
  - name: research
    resources: [{flavor: gpu, quotas: {gpu: 64, cpu: 512, memory: 4Ti}}]
workspaces:
  - name: speech
    local_queues: [{name: default, cluster_queue: research}]
    storage:
      url: s3://tau-runs/speech
      endpoint_url: http://minio.storage.svc:9000
      credentials_secret: speech-s3
  - name: ambient
    local_queues: [{name: default, cluster_queue: research}]
    storage: {url: "s3://tau-runs"}
"""


def objects(
    workspace: str = "speech", resume: str | None = None, **fields: Any
) -> list[dict[str, Any]]:
    data: dict[str, Any] = {
        "name": "asr",
        "workspace": workspace,
        "image": "ghcr.io/acme/asr:2.0",
        "command": ["python", "train.py"],
        "resources": {"gpus": 1},
    }
    data.update(fields)
    spec = TauSpec.model_validate(data)
    policy = load_policy_text(POLICY, "policy.yaml").policy
    ident = AttemptIdentity("asr-q4m8z", 1 if resume else 0, "7" * 64, resume)
    return render(attempt_input(spec, ident, place(spec, policy, TARGET), TARGET))


def pod_of(objs: list[dict[str, Any]], kind: str = "Job") -> dict[str, Any]:
    (job,) = [o for o in objs if o["kind"] == kind]
    pod: dict[str, Any] = job["spec"]["template"]["spec"]
    return pod


def test_a_resumed_attempt_matches_its_golden_file() -> None:
    assert_golden(GOLDEN / "plan_object_storage_resume.yaml", objects(resume="step-0000000400"))


@pytest.mark.parametrize(
    "fields", [{}, {"launcher": "torchrun", "nodes": 2}, {"launcher": "ray", "nodes": 2}]
)
@pytest.mark.parametrize("resume", [None, "step-0000000400"])
def test_every_shape_validates_strictly(fields: dict[str, Any], resume: str | None) -> None:
    require_schemas()
    for obj in objects(resume=resume, **fields):
        assert validate_object(obj, (SCHEMAS / "kuberay",)) == [], obj["kind"]


def test_the_pod_fetches_then_syncs_beside_the_workload_on_an_empty_dir() -> None:
    pod = pod_of(objects(resume="step-0000000400"))
    names = [c["name"] for c in pod["initContainers"]]
    assert names == ["fetch-code", "fetch-resume", "sync-checkpoints", "report"]
    fetch, sidecar = pod["initContainers"][1:3]
    assert "restartPolicy" not in fetch and sidecar["restartPolicy"] == "Always"
    assert {"name": "run-data", "emptyDir": {}} in pod["volumes"]
    for c in (fetch, sidecar, pod["containers"][0]):
        assert {"name": "run-data", "mountPath": "/tau/run"} in c["volumeMounts"]
    env = {e["name"]: e.get("value") for e in fetch["env"]}
    assert env["TAU_RESUME_STEP"] == "step-0000000400"
    assert env["TAU_STORAGE_URL"] == "s3://tau-runs/speech"
    assert env["TAU_STORAGE_ENDPOINT"] == "http://minio.storage.svc:9000"
    assert env["TAU_CHECKPOINT_DIR"] == "/tau/run/checkpoints"
    assert env["TAU_RUN_ID"] == "asr-q4m8z"
    main_env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert main_env["TAU_RESUME_FROM"] == "/tau/run/checkpoints/step-0000000400"
    sidecar_env = {e["name"]: e.get("value") for e in sidecar["env"]}
    assert sidecar_env["TAU_OUTPUT_DIR"] == "/tau/run/outputs"
    assert sidecar["command"] == ["python", "-m", "taugrid.podhelper", "sync-checkpoints"]


def test_credentials_come_from_the_secret_by_reference_only() -> None:
    for c in pod_of(objects(resume="step-0000000400"))["initContainers"][1:3]:
        creds = {e["name"]: e for e in c["env"] if e["name"].startswith("AWS_")}
        assert set(creds) == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
        for name, e in creds.items():
            assert "value" not in e
            assert e["valueFrom"] == {"secretKeyRef": {"name": "speech-s3", "key": name}}
    # Without a Secret the pod's own identity is used: no AWS_ variable, no endpoint.
    sidecar = pod_of(objects("ambient"))["initContainers"][-2]
    names = {e["name"] for e in sidecar["env"]}
    assert not any(n.startswith("AWS_") for n in names) and "TAU_STORAGE_ENDPOINT" not in names


def test_a_fresh_start_has_no_download_and_every_ray_pod_syncs() -> None:
    assert [c["name"] for c in pod_of(objects())["initContainers"]] == [
        "fetch-code",
        "sync-checkpoints",
        "report",
    ]
    (ray,) = objects(launcher="ray", nodes=2)[1:]
    cluster = ray["spec"]["rayClusterSpec"]
    pods = [cluster["headGroupSpec"]["template"]["spec"]] + [
        g["template"]["spec"] for g in cluster["workerGroupSpecs"]
    ]
    for pod in pods:
        assert "sync-checkpoints" in [c["name"] for c in pod["initContainers"]]
    # The Ray driver runs on the head: its pod alone reports the metrics.
    assert [c["name"] for c in pods[0]["initContainers"]][-1] == "report"
    assert all("report" not in [c["name"] for c in p["initContainers"]] for p in pods[1:])
