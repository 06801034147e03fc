"""A run's attempt as a batch/v1 Job: strict schema validation (kubernetes-validate, the
bundled 1.32 schemas), the contract with Kueue, and a golden file of the whole object."""

from __future__ import annotations

from pathlib import Path

import pytest

from k8s_golden import assert_golden
from k8s_validate import validate_builtin
from taugrid.errors import UsageError
from taugrid.manifests.workloads import JobInput, SecretRef, job_name, render_job

GOLDEN = Path(__file__).parent / "golden"


def full() -> JobInput:
    return JobInput(
        run_id="train-7f3a9c",
        attempt=2,
        workspace="vision",
        namespace="tau-vision",
        queue="default",
        priority_class="high",
        image="ghcr.io/acme/train:1.4",
        command=["python", "train.py", "--epochs", "3"],
        env={"TAU_RUN_ID": "train-7f3a9c", "TAU_ATTEMPT": "2", "PYTHONUNBUFFERED": "1"},
        secrets={"HF_TOKEN": SecretRef("tau-secrets-vision", "hf-token")},
        gpus=2,
        cpu_millis=8000,
        memory_bytes=64 << 30,
        stop_grace_s=30.5,
        timeout_s=7200,
    )


def test_the_job_validates_strictly_and_matches_its_golden_file() -> None:
    job = render_job(full())
    assert validate_builtin(job) == []
    assert_golden(GOLDEN / "job_command.yaml", job)


def test_kueue_admits_it_and_nothing_runs_unadmitted() -> None:
    job = render_job(full())
    meta, spec = job["metadata"], job["spec"]
    assert meta["labels"]["kueue.x-k8s.io/queue-name"] == "default"
    assert meta["labels"]["kueue.x-k8s.io/priority-class"] == "high"
    assert spec["suspend"] is True
    # The pods carry the run's labels, not Kueue's (Kueue reads those from the Job).
    pod_labels = spec["template"]["metadata"]["labels"]
    assert pod_labels == {
        "taugrid.io/run-id": "train-7f3a9c",
        "taugrid.io/workspace": "vision",
        "taugrid.io/attempt": "2",
        "taugrid.io/managed-by": "taugrid",
    }
    # A disruption (eviction, preemption) is not a failure of the attempt.
    assert spec["backoffLimit"] == 0
    assert spec["podFailurePolicy"]["rules"] == [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    ]


def test_quantities_are_strings_and_secrets_are_references() -> None:
    pod = render_job(full())["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["resources"] == {
        "requests": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "2"},
        "limits": {"memory": "64Gi", "nvidia.com/gpu": "2"},
    }
    env = {e["name"]: e for e in container["env"]}
    assert env["HF_TOKEN"] == {
        "name": "HF_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "tau-secrets-vision", "key": "hf-token"}},
    }
    assert "value" not in env["HF_TOKEN"]
    assert pod["terminationGracePeriodSeconds"] == 31  # stop_grace rounded up
    assert render_job(full())["spec"]["activeDeadlineSeconds"] == 7200


def test_the_pod_is_restricted_and_not_root() -> None:
    pod = render_job(full())["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    ctx = pod["containers"][0]["securityContext"]
    assert ctx["allowPrivilegeEscalation"] is False and ctx["capabilities"] == {"drop": ["ALL"]}


def test_a_shell_command_a_cpu_only_run_and_no_timeout() -> None:
    inp = JobInput(
        run_id="etl-1",
        attempt=0,
        workspace="default",
        namespace="default",
        queue="default",
        image="python:3.12-slim",
        command="python prep.py && echo done",
        cpu_millis=1500,
    )
    job = render_job(inp)
    assert validate_builtin(job) == []
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["/bin/sh", "-c", "python prep.py && echo done"]
    assert container["resources"] == {"requests": {"cpu": "1500m"}}
    assert "activeDeadlineSeconds" not in job["spec"]
    assert "kueue.x-k8s.io/priority-class" not in job["metadata"]["labels"]


def test_what_a_cluster_cannot_take_is_refused_in_words() -> None:
    base = full()
    with pytest.raises(UsageError, match="too long for a Kubernetes Job name"):
        job_name("r" * 61, 0)
    with pytest.raises(UsageError, match="needs an image"):
        render_job(JobInput(**{**base.__dict__, "image": ""}))
    clash = {**base.__dict__, "env": {"HF_TOKEN": "x"}}
    with pytest.raises(UsageError, match="both as values and as secrets"):
        render_job(JobInput(**clash))
