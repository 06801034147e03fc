"""torchrun and multi-node runs as an Indexed Job with a headless Service: strict schema
validation, the rendezvous every rank sees, and a golden file."""

from __future__ import annotations

from pathlib import Path

import pytest

from k8s_golden import assert_golden
from k8s_validate import validate_builtin
from taugrid.errors import UsageError
from taugrid.manifests.workloads import JobInput, render_indexed_job, render_job

GOLDEN = Path(__file__).parent / "golden"


def ddp(**kw: object) -> JobInput:
    base: dict[str, object] = {
        "run_id": "ddp-4b2e",
        "attempt": 0,
        "workspace": "vision",
        "namespace": "tau-vision",
        "queue": "default",
        "image": "ghcr.io/acme/train:1.4",
        "command": ["python", "-u", "train.py", "--epochs", "3"],
        "env": {"TAU_RUN_ID": "ddp-4b2e"},
        "gpus": 4,
        "nodes": 2,
        "launcher": "torchrun",
    }
    base.update(kw)
    return JobInput(**base)  # type: ignore[arg-type]


def test_both_objects_validate_strictly_and_match_the_golden_file() -> None:
    objects = render_indexed_job(ddp())
    assert [o["kind"] for o in objects] == ["Service", "Job"]
    for obj in objects:
        assert validate_builtin(obj) == [], obj["kind"]
    assert_golden(GOLDEN / "indexed_job_torchrun.yaml", objects)


def test_rank_zero_has_a_stable_name_and_every_rank_its_index() -> None:
    service, job = render_indexed_job(ddp())
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 2, 2)
    pod = spec["template"]["spec"]
    assert pod["subdomain"] == service["metadata"]["name"] == job["metadata"]["name"]
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    # The Service selects this attempt's pods, by labels the pods carry.
    pod_labels = spec["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["MASTER_ADDR"]["value"] == "ddp-4b2e-a0-0.ddp-4b2e-a0"
    assert env["NNODES"]["value"] == "2" and env["WORLD_SIZE"]["value"] == "8"
    assert env["TAU_DIST_BACKEND"]["value"] == "nccl"
    assert env["NODE_RANK"]["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    )


def test_torchrun_runs_the_script_with_one_process_per_gpu() -> None:
    _, job = render_indexed_job(ddp())
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["command"] == [
        "python",
        "-m",
        "torch.distributed.run",
        "--nnodes=2",
        "--node-rank=$(NODE_RANK)",
        "--nproc-per-node=4",
        "--master-addr=ddp-4b2e-a0-0.ddp-4b2e-a0",
        "--master-port=29500",
        "train.py",
        "--epochs",
        "3",
    ]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "4"  # per node


def test_a_cpu_torchrun_on_one_node_and_a_plain_command_on_two() -> None:
    _, job = render_indexed_job(ddp(gpus=0, nodes=1, procs_per_node=3))
    assert validate_builtin(job) == []
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    assert "--nproc-per-node=3" in command and "--nnodes=1" in command
    env = {
        e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["TAU_DIST_BACKEND"] == "gloo" and env["WORLD_SIZE"] == "3"
    _, plain = render_indexed_job(ddp(launcher="command", command="./run-node.sh"))
    assert plain["spec"]["template"]["spec"]["containers"][0]["command"] == [
        "/bin/sh",
        "-c",
        "./run-node.sh",
    ]


def test_what_the_launcher_owns_cannot_be_set_and_shapes_stay_apart() -> None:
    with pytest.raises(UsageError, match="the launcher sets MASTER_ADDR"):
        render_indexed_job(ddp(env={"MASTER_ADDR": "10.0.0.1"}))
    with pytest.raises(UsageError, match="launcher 'ray'"):
        render_indexed_job(ddp(launcher="ray"))
    with pytest.raises(UsageError, match="nodes: 1 with launcher: command only"):
        render_job(ddp())
    with pytest.raises(UsageError, match="too long for 2 pods' host names"):
        render_indexed_job(ddp(run_id="r" * 59))  # "r...r-a0" fits, "r...r-a0-1" does not
