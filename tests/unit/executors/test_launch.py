import socket
from collections.abc import Sequence

import pytest

from taugrid.errors import UsageError
from taugrid.executors.local.launch import free_port, launch_command

PREFIX = [
    "--nnodes=1",
    "--node-rank=0",
    "--nproc-per-node=2",
    "--master-addr=127.0.0.1",
    "--master-port=29511",
]


def torchrun(
    command: list[str] | str,
    *,
    gpus: Sequence[int] = (),
    procs: int | None = 2,
    port: int = 29511,
) -> tuple[list[str] | str, dict[str, str]]:
    return launch_command(
        command,
        launcher="torchrun",
        nodes=1,
        gpu_indices=gpus,
        procs_per_node=procs,
        master_port=port,
    )


def test_command_launcher_leaves_the_command_alone() -> None:
    for cmd in (["python", "train.py"], "python train.py --lr ${LR} && echo done"):
        got = launch_command(
            cmd, launcher="command", nodes=1, gpu_indices=[0], procs_per_node=4, master_port=1
        )
        assert got == (cmd, {})


@pytest.mark.parametrize(
    ("command", "python", "target"),
    [
        (["python", "train.py", "a", "b"], "python", ["train.py", "a", "b"]),
        (["python3", "train.py"], "python3", ["train.py"]),
        (["python3.11", "-u", "train.py", "--x"], "python3.11", ["train.py", "--x"]),
        (["/opt/venv/bin/python", "t.py"], "/opt/venv/bin/python", ["t.py"]),
        (["python", "-m", "pkg.train", "--lr", "1"], "python", ["-m", "pkg.train", "--lr", "1"]),
        (["python", "-u", "-m", "pkg"], "python", ["-m", "pkg"]),
        (["train.py", "--steps", "3"], "python3", ["train.py", "--steps", "3"]),
        (["./scripts/train.py"], "python3", ["./scripts/train.py"]),
        # Not python, or python with options torchrun cannot pass on: run as written.
        (["bash", "run.sh"], "python3", ["--no-python", "bash", "run.sh"]),
        (["python", "-O", "t.py"], "python", ["--no-python", "python", "-O", "t.py"]),
        (["python", "-c", "print(1)"], "python", ["--no-python", "python", "-c", "print(1)"]),
        (["python", "-m"], "python", ["--no-python", "python", "-m"]),
        (["python"], "python", ["--no-python", "python"]),
        (["pythonic", "x"], "python3", ["--no-python", "pythonic", "x"]),
        # A string without shell syntax is split like a shell would.
        ("python train.py --name 'a b'", "python", ["train.py", "--name", "a b"]),
        ("python -m pkg.train", "python", ["-m", "pkg.train"]),
        ("  ./train.py  ", "python3", ["./train.py"]),
        ("nvidia-smi -L", "python3", ["--no-python", "nvidia-smi", "-L"]),
    ],
)
def test_torchrun_argv_runs_the_script_under_the_commands_python(
    command: list[str] | str, python: str, target: list[str]
) -> None:
    argv, _ = torchrun(command)
    assert argv == [python, "-m", "torch.distributed.run", *PREFIX, *target]


@pytest.mark.parametrize(
    ("command", "python"),
    [
        ("python train.py --lr ${LR}", "python"),
        ("python3 train.py > out-$RANK.log", "python3"),
        ("cd src && python train.py", "python3"),
        ("python train.py 'unclosed $X", "python3"),
        ("$PY train.py", "python3"),
        ("echo a; echo b", "python3"),
        ("python train.py data/*.csv", "python"),
    ],
)
def test_torchrun_leaves_shell_syntax_to_a_shell_in_each_worker(command: str, python: str) -> None:
    argv, _ = torchrun(command)
    assert argv == [
        python,
        "-m",
        "torch.distributed.run",
        *PREFIX,
        "--no-python",
        "/bin/sh",
        "-c",
        command,
    ]


def test_torchrun_env_on_cpu() -> None:
    _, env = torchrun(["python", "t.py"], procs=3)
    assert env == {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29511",
        "NNODES": "1",
        "NODE_RANK": "0",
        "WORLD_SIZE": "3",
        "TAU_DIST_BACKEND": "gloo",
    }


def nprocs(argv: list[str] | str) -> str:
    (flag,) = [a for a in argv if a.startswith("--nproc-per-node=")]
    return flag.split("=", 1)[1]


def test_torchrun_runs_one_process_per_gpu_with_nccl() -> None:
    argv, env = torchrun(["python", "t.py"], gpus=[2, 5, 7], procs=None)
    assert nprocs(argv) == "3"
    assert env["WORLD_SIZE"] == "3" and env["TAU_DIST_BACKEND"] == "nccl"


def test_explicit_procs_per_node_wins_over_the_gpu_count() -> None:
    argv, env = torchrun(["python", "t.py"], gpus=[0, 1, 2, 3], procs=2)
    assert nprocs(argv) == "2" and env["WORLD_SIZE"] == "2"
    assert env["TAU_DIST_BACKEND"] == "nccl"


def test_torchrun_defaults_to_one_process_without_gpus() -> None:
    argv, env = torchrun(["python", "t.py"], procs=None)
    assert nprocs(argv) == "1" and env["WORLD_SIZE"] == "1"


@pytest.mark.parametrize("launcher", ["command", "torchrun"])
def test_launch_command_starts_one_node_only(launcher: str) -> None:
    # Several nodes are launch_nodes' (tests/unit/executors/test_launch_nodes.py).
    with pytest.raises(UsageError, match=r"nodes: 2: launch_command starts one node"):
        launch_command(
            ["python", "t.py"],
            launcher=launcher,
            nodes=2,
            gpu_indices=[],
            procs_per_node=None,
            master_port=29500,
        )


def test_ray_runs_through_its_driver() -> None:
    with pytest.raises(UsageError, match="launcher: ray starts a Ray cluster of its own"):
        launch_command(
            "python t.py",
            launcher="ray",
            nodes=1,
            gpu_indices=[],
            procs_per_node=None,
            master_port=29500,
        )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"launcher": "mpirun"}, "unknown launcher 'mpirun'"),
        ({"nodes": 0}, "nodes must be at least 1"),
        ({"procs_per_node": 0}, "procs_per_node must be at least 1"),
        ({"master_port": 0}, "master port must be in 1..65535"),
        ({"master_port": 70000}, "master port must be in 1..65535"),
        ({"command": []}, "command is empty"),
        ({"command": "   "}, "command is empty"),
    ],
)
def test_bad_requests_are_usage_errors(kwargs: dict[str, object], message: str) -> None:
    args: dict[str, object] = {
        "command": ["python", "t.py"],
        "launcher": "torchrun",
        "nodes": 1,
        "gpu_indices": [],
        "procs_per_node": None,
        "master_port": 29500,
        **kwargs,
    }
    with pytest.raises(UsageError, match=message):
        launch_command(**args)  # type: ignore[arg-type]


def test_launch_command_does_not_change_its_input() -> None:
    cmd = ["python", "-u", "t.py"]
    torchrun(cmd)
    assert cmd == ["python", "-u", "t.py"]


def test_free_port_can_be_bound() -> None:
    port = free_port()
    assert 0 < port < 65536
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", port))
