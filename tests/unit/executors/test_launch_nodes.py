"""launch.launch_nodes: what each of a run's nodes gets on this machine, the same as each
pod of the cluster's Indexed Job (manifests.workloads.render_indexed_job). Pure."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from taugrid.errors import UsageError
from taugrid.executors.local.launch import (
    NodeLaunch,
    gpu_slices,
    launch_command,
    launch_nodes,
)
from taugrid.manifests.workloads import JobInput, render_indexed_job
from taugrid.spec.modes import LOCAL

PORT = 29611


def nodes_of(
    command: list[str] | str = ("python", "train.py", "--lr", "3"),
    *,
    launcher: str = "torchrun",
    nodes: int = 2,
    gpus: Sequence[int] = (),
    procs: int | None = None,
) -> list[NodeLaunch]:
    return launch_nodes(
        list(command) if isinstance(command, tuple) else command,
        launcher=launcher,
        nodes=nodes,
        gpu_indices=gpus,
        procs_per_node=procs,
        master_port=PORT,
    )


def test_one_torchrun_per_node_with_its_rank() -> None:
    got = nodes_of(procs=2)
    assert [n.command for n in got] == [
        [
            "python",
            "-m",
            "torch.distributed.run",
            "--nnodes=2",
            f"--node-rank={rank}",
            "--nproc-per-node=2",
            "--master-addr=127.0.0.1",
            f"--master-port={PORT}",
            "train.py",
            "--lr",
            "3",
        ]
        for rank in (0, 1)
    ]


def test_every_node_gets_the_indexed_jobs_environment() -> None:
    got = nodes_of(nodes=3, procs=2)
    assert [n.env for n in got] == [
        {
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(PORT),
            "NNODES": "3",
            "NODE_RANK": str(rank),
            "WORLD_SIZE": "6",
            "TAU_DIST_BACKEND": "gloo",
            "CUDA_VISIBLE_DEVICES": "",
        }
        for rank in range(3)
    ]


def test_the_same_variables_as_the_cluster_gives_each_pod() -> None:
    """Names and values but the address (a pod's DNS name there, 127.0.0.1 here)."""
    inp = JobInput(
        run_id="r-abcde",
        attempt=0,
        workspace="ws",
        namespace="tau-ws",
        queue="default",
        image="x/y:1",
        command=["python", "train.py"],
        launcher="torchrun",
        nodes=2,
        gpus=1,
    )
    _, job = render_indexed_job(inp)
    container = job["spec"]["template"]["spec"]["containers"][0]
    cluster = {e["name"]: e.get("value") for e in container["env"]}
    here = nodes_of(["python", "train.py"], gpus=[4, 5])
    for node in here:
        for name in ("NNODES", "WORLD_SIZE", "TAU_DIST_BACKEND"):
            assert node.env[name] == cluster[name], name
        assert {"MASTER_ADDR", "MASTER_PORT", "NODE_RANK"} <= set(cluster) & set(node.env)
    # The same torchrun, up to the rank (the completion index there) and the rendezvous.
    local = here[1].command
    assert isinstance(local, list)
    assert [a for a in container["command"] if not a.startswith("--master")] == [
        a.replace("--node-rank=1", "--node-rank=$(NODE_RANK)")
        for a in local
        if not a.startswith("--master")
    ]


def test_each_node_gets_its_slice_of_the_gpus() -> None:
    got = nodes_of(gpus=[3, 1, 0, 2])
    assert [n.env["CUDA_VISIBLE_DEVICES"] for n in got] == ["3,1", "0,2"]
    assert all(n.env["TAU_DIST_BACKEND"] == "nccl" for n in got)
    # One process per GPU of the node by default, procs_per_node when given.
    assert all("--nproc-per-node=2" in n.command for n in got)
    assert got[0].env["WORLD_SIZE"] == "4"
    four = nodes_of(gpus=[0, 1, 2, 3], procs=4)
    assert four[0].env["WORLD_SIZE"] == "8" and "--nproc-per-node=4" in four[0].command


def test_gpu_slices() -> None:
    assert gpu_slices([], 3) == [(), (), ()]
    assert gpu_slices([5, 6, 7, 8, 9, 10], 3) == [(5, 6), (7, 8), (9, 10)]
    with pytest.raises(UsageError, match="3 GPUs cannot be shared evenly by 2 nodes"):
        gpu_slices([0, 1, 2], 2)


def test_command_launcher_runs_the_command_on_every_node() -> None:
    cmd = "python train.py --rank $NODE_RANK && echo done"
    got = nodes_of(cmd, launcher="command", gpus=[0, 1])
    assert [n.command for n in got] == [cmd, cmd]
    assert [n.env["NODE_RANK"] for n in got] == ["0", "1"]
    assert [n.env["CUDA_VISIBLE_DEVICES"] for n in got] == ["0", "1"]
    assert got[0].env["WORLD_SIZE"] == "2" and got[0].env["NNODES"] == "2"


@pytest.mark.parametrize("launcher", ["command", "torchrun"])
def test_one_node_is_exactly_launch_command(launcher: str) -> None:
    cmd = ["python", "t.py"]
    (only,) = nodes_of(cmd, launcher=launcher, nodes=1, gpus=[0, 1])
    argv, env = launch_command(
        cmd, launcher=launcher, nodes=1, gpu_indices=[0, 1], procs_per_node=None, master_port=PORT
    )
    assert (only.command, only.env) == (argv, env)
    assert "CUDA_VISIBLE_DEVICES" not in only.env  # one node: the run's own (all its GPUs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"nodes": LOCAL.max_nodes + 1}, f"local mode runs at most {LOCAL.max_nodes} nodes"),
        ({"launcher": "ray"}, "launcher: ray runs a single-node Ray cluster in local mode"),
        ({"launcher": "mpirun"}, "unknown launcher 'mpirun'"),
        ({"procs": 0}, "procs_per_node must be at least 1"),
        ({"gpus": [0, 1, 2]}, "cannot be shared evenly"),
    ],
)
def test_what_local_mode_cannot_run(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        nodes_of(**kwargs)  # type: ignore[arg-type]


def test_the_local_maximum_runs() -> None:
    got = nodes_of(nodes=LOCAL.max_nodes)
    assert [n.env["NODE_RANK"] for n in got] == [str(i) for i in range(LOCAL.max_nodes)]
