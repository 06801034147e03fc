"""From spec + policy to one attempt's objects: the policy's choices (namespace, queue,
priority, flavors, storage), the refusals before anything is created, and every object
of a matrix of specs validated strictly (built-in kinds and the KubeRay CRD)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from k8s_golden import assert_golden
from k8s_validate import SCHEMAS, require_schemas, validate_object
from taugrid.errors import UsageError
from taugrid.manifests.plan import (
    TOKEN_PLACEHOLDER,
    AttemptIdentity,
    ClusterTarget,
    attempt_input,
    check_submit,
    place,
    render_attempt,
)
from taugrid.policy.loader import load_policy_text
from taugrid.policy.models import Policy
from taugrid.spec.models import TauSpec

GOLDEN = Path(__file__).parent / "golden"
DIGEST = "5" * 64
TARGET = ClusterTarget(namespace_prefix="tau-", server_url="https://tau.example.org")

POLICY = """\
flavors:
  - name: h100
    gpu_type: h100
    gpus_per_node: 8
    node_labels: {gpu.example.org/type: h100}
    taints: [{key: gpu, value: h100, effect: NoSchedule}]
    tolerate_taints: false
  - name: a100
    gpu_type: a100
    gpus_per_node: 4
    node_labels: {gpu.example.org/type: a100}
  - name: cpu
    node_labels: {node.example.org/pool: cpu}
cluster_queues:
  - name: research
    resources:
      - flavor: h100
        quotas: {gpu: 64, cpu: 512, memory: 4Ti}
      - flavor: a100
        quotas: {gpu: 32, cpu: 256, memory: 2Ti}
      - flavor: cpu
        quotas: {gpu: 0, cpu: 256, memory: 1Ti}
workspaces:
  - name: vision
    local_queues:
      - {name: default, cluster_queue: research}
      - {name: batch, cluster_queue: research}
    storage: {pvc: vision-runs}
  - name: nlp
    local_queues: [{name: default, cluster_queue: research}]
"""


def policy() -> Policy:
    return load_policy_text(POLICY, "policy.yaml").policy


def spec(**fields: Any) -> TauSpec:
    data: dict[str, Any] = {
        "name": "train",
        "workspace": "vision",
        "image": "ghcr.io/acme/train:1.4",
        "command": ["python", "train.py"],
    }
    data.update(fields)
    return TauSpec.model_validate(data)


def objects(s: TauSpec, attempt: int = 0, resume: str | None = None) -> list[dict[str, Any]]:
    ident = AttemptIdentity("train-x7k2p", attempt, DIGEST, resume)
    return render_attempt(attempt_input(s, ident, place(s, policy(), TARGET), TARGET))


def by_kind(objs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [o for o in objs if o["kind"] == kind]
    return found


def pod_of(objs: list[dict[str, Any]]) -> dict[str, Any]:
    job = by_kind(objs, "Job")
    pod: dict[str, Any] = job["spec"]["template"]["spec"]
    return pod


MATRIX = {
    "gpu_h100_pvc": spec(resources={"gpus": 8, "gpu_type": "h100", "cpus": 32, "memory": "512Gi"}),
    "cpu_only_other_workspace": spec(workspace="nlp", resources={"cpus": 2, "memory": "4Gi"}),
    "torchrun_two_nodes": spec(
        launcher="torchrun", nodes=2, resources={"gpus": 4, "gpu_type": "a100"}, priority="high"
    ),
    "ray_three_workers": spec(
        launcher="ray", nodes=3, resources={"gpus": 1}, secrets={"WANDB_API_KEY": "wandb"}
    ),
    "shell_with_setup_and_secret": spec(
        command="python train.py --lr 3e-4",
        setup="pip install -r requirements.txt",
        secrets={"HF_TOKEN": "hf-token"},
        queue="batch",
        timeout="2h",
    ),
}


@pytest.mark.parametrize("case", sorted(MATRIX))
def test_every_object_of_the_matrix_validates_strictly(case: str) -> None:
    require_schemas()
    objs = objects(MATRIX[case])
    for obj in objs:
        assert validate_object(obj, (SCHEMAS / "kuberay",)) == [], (case, obj["kind"])
    kinds = [o["kind"] for o in objs]
    assert kinds[0] == "Secret"  # the code token exists before any pod can ask for it
    assert kinds[-1] in ("Job", "RayJob")


def test_the_gpu_case_matches_its_golden_file() -> None:
    assert_golden(GOLDEN / "plan_gpu_h100_pvc.yaml", objects(MATRIX["gpu_h100_pvc"]))


def test_namespace_queue_and_priority_come_from_the_policy() -> None:
    job = by_kind(objects(spec()), "Job")
    assert job["metadata"]["namespace"] == "tau-vision"
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "default"
    assert job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "normal"
    batch = by_kind(objects(spec(queue="batch", priority="low")), "Job")
    assert batch["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "batch"
    assert batch["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "low"


def test_a_gpu_type_pins_its_flavors_nodes_and_tolerates_what_kueue_will_not() -> None:
    pod = pod_of(objects(MATRIX["gpu_h100_pvc"]))
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [
        {
            "matchExpressions": [
                {"key": "gpu.example.org/type", "operator": "In", "values": ["h100"]}
            ]
        }
    ]
    # h100 has tolerate_taints: false, so the pod must tolerate its taint itself.
    assert pod["tolerations"] == [
        {"key": "gpu", "operator": "Equal", "value": "h100", "effect": "NoSchedule"}
    ]
    a100 = pod_of(objects(spec(resources={"gpus": 2, "gpu_type": "a100"})))
    assert "tolerations" not in a100  # Kueue adds a flavor's own tolerations


def test_gpus_per_node_narrow_the_flavors_too() -> None:
    # 6 GPUs per node: only h100 nodes (8) have them, a100 (4) do not.
    pod = pod_of(objects(spec(resources={"gpus": 6})))
    values = [
        t["matchExpressions"][0]["values"]
        for t in pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"
        ]
    ]
    # cpu has no gpus_per_node, so it is not ruled out: its nodes may have GPUs Kueue counts.
    assert values == [["h100"], ["cpu"]]
    assert "affinity" not in pod_of(objects(spec(resources={"gpus": 1})))  # all flavors fit


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"resources": {"gpus": 1, "gpu_type": "mi300"}}, "GPU type 'mi300' is not offered"),
        ({"resources": {"gpus": 16, "gpu_type": "h100"}}, "asks for 16 GPUs per node"),
        ({"queue": "nope"}, "queue 'nope' does not exist in workspace 'vision'; queues: batch"),
        ({"priority": "urgent"}, "priority 'urgent' does not exist; priorities: low"),
        ({"workspace": "audio"}, "workspace 'audio' is not in the policy"),
        ({"image": None}, "a cluster run needs an image"),
        ({"secrets": {"TOKEN": "my/token"}}, "cannot be a Kubernetes Secret key"),
        (
            {"launcher": "ray", "name": "a-long-run-name-for-a-rayjob-abcdefghij"},
            "cannot name a RayJob",
        ),
        # 38 characters fit attempt 0 (47 with "-xxxxx-a0") but not attempt 10.
        (
            {
                "launcher": "ray",
                "name": "a-long-run-name-for-a-rayjob-abcdefghi",
                "restart": {"max": 10},
            },
            "cannot name a RayJob",
        ),
    ],
)
def test_what_a_cluster_cannot_run_is_refused_before_anything_exists(
    fields: dict[str, Any], message: str
) -> None:
    with pytest.raises(UsageError, match=message.replace("(", r"\(")):
        check_submit(spec(**fields), policy(), TARGET)


def test_a_spec_a_cluster_can_run_passes_the_submit_check() -> None:
    for case in MATRIX.values():
        check_submit(case, policy(), TARGET)  # raises on any refusal
    check_submit(
        spec(launcher="ray", name="a-long-run-name-for-a-rayjob-abcdefghi"), policy(), TARGET
    )


def test_storage_the_environment_and_resume_point_inside_the_pod() -> None:
    pod = pod_of(objects(spec(), attempt=2, resume="step-0000000400"))
    (main,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in main["env"]}
    assert env["TAU_CHECKPOINT_DIR"] == "/tau/run/checkpoints"
    assert env["TAU_RESUME_FROM"] == "/tau/run/checkpoints/step-0000000400"
    assert env["TAU_OUTPUT_DIR"] == "/tau/run/outputs"
    assert env["TAU_ATTEMPT"] == "2"
    # The device plugin decides the GPUs; the submitter's shell is not the image's.
    assert "CUDA_VISIBLE_DEVICES" not in env and "PATH" not in env
    run_mount = next(m for m in main["volumeMounts"] if m["mountPath"] == "/tau/run")
    assert run_mount["subPath"] == "runs/train-x7k2p"
    volume = next(v for v in pod["volumes"] if v["name"] == run_mount["name"])
    assert volume["persistentVolumeClaim"] == {"claimName": "vision-runs"}
    # A workspace without storage keeps the run's files in the pod.
    nlp = pod_of(objects(spec(workspace="nlp")))
    assert {"name": "run-data", "emptyDir": {}} in nlp["volumes"]


def test_the_code_arrives_by_an_init_container_with_the_attempts_token() -> None:
    objs = objects(spec())
    secret = by_kind(objs, "Secret")
    # A dry run issues no token.
    assert secret["stringData"] == {"token": TOKEN_PLACEHOLDER, "report": TOKEN_PLACEHOLDER}
    pod = pod_of(objs)
    fetch, _report = pod["initContainers"]
    env = {e["name"]: e for e in fetch["env"]}
    assert env["TAU_SNAPSHOT_URL"]["value"] == f"https://tau.example.org/api/v1/snapshots/{DIGEST}"
    assert env["TAU_SNAPSHOT_SHA256"]["value"] == DIGEST
    assert env["TAU_SNAPSHOT_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": secret["metadata"]["name"],
        "key": "token",
    }
    code_mount = {"name": "code", "mountPath": "/workspace"}
    assert (
        code_mount in fetch["volumeMounts"] and code_mount in pod["containers"][0]["volumeMounts"]
    )
    issued = render_attempt(
        attempt_input(
            spec(),
            AttemptIdentity("train-x7k2p", 0, DIGEST),
            place(spec(), policy(), TARGET),
            TARGET,
        ),
        token="t0ken",
        report_token="rep0rt",
    )
    assert by_kind(issued, "Secret")["stringData"] == {"token": "t0ken", "report": "rep0rt"}


def test_the_reporting_sidecar_holds_the_report_token_and_the_workload_does_not() -> None:
    pod = pod_of(objects(spec()))
    report = next(c for c in pod["initContainers"] if c["name"] == "report")
    assert report["restartPolicy"] == "Always"  # a native sidecar beside the workload
    assert report["command"] == ["python", "-m", "taugrid.podhelper", "report"]
    env = {e["name"]: e for e in report["env"]}
    assert env["TAU_REPORT_URL"]["value"] == (
        "https://tau.example.org/api/v1/runs/train-x7k2p/attempts/0"
    )
    assert env["TAU_REPORT_TOKEN"]["valueFrom"]["secretKeyRef"]["key"] == "report"
    assert env["TAU_METRICS_FILE"]["value"] == "/tau/run/attempts/0/metrics.jsonl"
    # The run's volume, read-only, at the workload's own path (the PVC's run directory).
    (mount,) = report["volumeMounts"]
    assert mount["readOnly"] is True and mount["mountPath"] == "/tau/run"
    assert mount["subPath"] == "runs/train-x7k2p"
    assert env["TAU_REPORT_CHECKPOINTS"]["value"] == "1"  # a PVC: the server cannot look
    workload = pod["containers"][0]
    assert not any(
        (e.get("valueFrom") or {}).get("secretKeyRef", {}).get("key") == "report"
        for e in workload["env"]
    )
    # Without a PVC (an emptyDir) the checkpoints die with the pod: metrics only.
    nlp = pod_of(objects(spec(workspace="nlp")))
    nlp_env = {e["name"] for c in nlp["initContainers"] if c["name"] == "report" for e in c["env"]}
    assert "TAU_METRICS_FILE" in nlp_env and "TAU_REPORT_CHECKPOINTS" not in nlp_env


def test_setup_runs_first_and_the_argv_passes_through_untouched() -> None:
    (main,) = pod_of(objects(spec(setup="pip install -e .", command=["python", "a b.py"])))[
        "containers"
    ]
    assert main["command"] == [
        "/bin/sh",
        "-c",
        'set -e\npip install -e .\nexec "$0" "$@"',
        "python",
        "a b.py",
    ]
