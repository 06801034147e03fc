"""launcher: ray in local mode, the pure parts: the driver's argv as the executor builds it
and reads it back, the Ray head's command line (its own ports, temp dir, CPUs, GPUs), the
job's runtime env and entrypoint (what the cluster's RayJob runs), the exit of a finished
job; and where local mode refuses it. tests/integration/test_ray_launcher.py runs a real
Ray."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

import pytest

from taugrid.errors import UsageError
from taugrid.executors.local import raydriver
from taugrid.executors.local.executor import LocalExecutor, find_ray_cli
from taugrid.executors.local.launch import launch_command, ray_command, ray_cpus
from taugrid.manifests.workloads import JobInput, render_rayjob
from taugrid.spec import TauSpec
from taugrid.spec.modes import LOCAL, LOCAL_WITHOUT_RAY, Capabilities, refusal, refusals

RUN = "tune-9c1d"
INSTALL = (
    "launcher: ray needs Ray installed beside the server: pip install 'taugrid[ray]' in the "
    "server's environment, then restart the server (or use command or torchrun)"
)
SINGLE_NODE = (
    "nodes: 2: launcher: ray runs a single-node Ray cluster in local mode; use nodes: 1 "
    "(Ray spreads the job's tasks over the run's CPUs and GPUs) or the Kubernetes mode"
)


def driver(**kw: object) -> list[str]:
    base: dict[str, object] = {
        "setup": None,
        "python": "/venv/bin/python",
        "ray": "/venv/bin/ray",
        "run_id": RUN,
        "attempt": 2,
        "nodes": 1,
        "gpu_indices": [3, 5],
        "resources": {"cpus": "1500m", "gpus": 2},
        "stop_grace_s": 7.5,
        "hidden_env": ["WANDB_API_KEY", "HF_TOKEN"],
    }
    base.update(kw)
    command = base.pop("command", ["python", "tune.py", "--trials", "8"])
    return ray_command(command, **base)  # type: ignore[arg-type]


def test_the_driver_runs_with_the_servers_python_and_reads_its_argv_back() -> None:
    argv = driver()
    assert argv[:4] == ["/venv/bin/python", "-I", "-S", raydriver.script_path()]
    assert argv[3].endswith("executors/local/raydriver.py") and Path(argv[3]).is_file()
    args = raydriver.parse_argv(argv[4:])
    assert args == raydriver.DriverArgs(
        ray="/venv/bin/ray",
        run_id=RUN,
        attempt=2,
        gpus=2,  # the placement's
        cpus=2,  # 1.5 CPUs rounded up
        stop_grace_s=7.5,
        hidden_env=("HF_TOKEN", "WANDB_API_KEY"),
        entrypoint="python tune.py --trials 8",
    )
    # No value of the environment is on the command line (any user can read it).
    assert not any("=" in a and not a.startswith("--") for a in argv)


@pytest.mark.parametrize(
    ("command", "setup"),
    [
        (["python", "tune.py", "--trials", "8"], None),
        (["python", "a b.py"], "pip install -e ."),
        ("python tune.py && echo done", "cd sub"),
    ],
)
def test_the_entrypoint_is_the_clusters(command: list[str] | str, setup: str | None) -> None:
    job = JobInput(
        run_id=RUN,
        attempt=0,
        workspace="w",
        namespace="tau-w",
        queue="default",
        image="rayproject/ray:2.40.0-py311",
        command=command,
        setup=setup,
        env={},
        launcher="ray",
    )
    ours = raydriver.parse_argv(driver(command=command, setup=setup)[4:]).entrypoint
    assert ours == render_rayjob(job)["spec"]["entrypoint"]


def test_the_job_request_cds_into_the_workdir_and_carries_the_environment() -> None:
    args = raydriver.parse_argv(driver()[4:])
    environ = {
        "TAU_RUN_ID": RUN,
        "TAU_CHECKPOINT_DIR": "/h/runs/x/checkpoints",
        "PATH": "/venv/bin:/usr/bin",
        "SEED": "7",
        "WANDB_API_KEY": "secret-value",  # a secret: inherited by Ray's processes only
        "CUDA_VISIBLE_DEVICES": "3,5",  # the raylet's; Ray narrows it per task
        "RAY_AUTH_TOKEN": "t0ken",
    }
    body = raydriver.job_request(args, "/h/runs/it's/workdir", environ)
    assert body["entrypoint"] == "cd '/h/runs/it'\"'\"'s/workdir' && python tune.py --trials 8"
    assert body["submission_id"] == f"tau-{RUN}-2"
    assert body["runtime_env"] == {
        "env_vars": {
            "PATH": "/venv/bin:/usr/bin",
            "SEED": "7",
            "TAU_CHECKPOINT_DIR": "/h/runs/x/checkpoints",
            "TAU_RUN_ID": RUN,
        }
    }
    env = raydriver.ray_env(environ, "tok")
    assert (env["RAY_AUTH_MODE"], env["RAY_AUTH_TOKEN"], env["TAU_RUN_ID"]) == ("token", "tok", RUN)


def test_the_ray_head_is_the_runs_own() -> None:
    args = raydriver.parse_argv(driver()[4:])
    temp = raydriver.temp_dir(RUN)
    assert temp == f"/tmp/tau-ray-{RUN}"
    ports = raydriver.free_ports()
    assert len({ports.gcs, ports.dashboard, ports.client_server, ports.dashboard_agent}) == 4
    argv = raydriver.start_argv(args, temp, ports)
    assert argv[:3] == ["/venv/bin/ray", "start", "--head"]
    for flag in (
        f"--port={ports.gcs}",
        f"--dashboard-port={ports.dashboard}",
        f"--ray-client-server-port={ports.client_server}",
        f"--dashboard-agent-listen-port={ports.dashboard_agent}",
        "--dashboard-host=127.0.0.1",
        f"--temp-dir={temp}",
        "--disable-usage-stats",
        "--num-cpus=2",
        "--num-gpus=2",
    ):
        assert flag in argv
    assert "--block" not in argv
    unlimited = raydriver.parse_argv(driver(resources={}, gpu_indices=[])[4:])
    argv = raydriver.start_argv(unlimited, temp, ports)
    assert "--num-gpus=0" in argv and not any(a.startswith("--num-cpus") for a in argv)


def test_the_temp_dir_leaves_room_for_rays_socket_paths() -> None:
    longest = "a" * 57 + "-x1y2z"  # a run id may have 63 characters
    other = "a" * 57 + "-q9r8s"
    temp = raydriver.temp_dir(longest)
    assert temp.startswith("/tmp/tau-ray-aaaa") and temp != raydriver.temp_dir(other)
    assert len(temp) + raydriver.RAY_SOCKET_SUFFIX_LEN <= raydriver.SOCKET_PATH_MAX
    short = "ab-12345"
    assert raydriver.temp_dir(short) == "/tmp/tau-ray-ab-12345"


@pytest.mark.parametrize(
    ("info", "code", "said"),
    [
        ({"status": "SUCCEEDED", "driver_exit_code": 0}, 0, None),
        (
            {
                "status": "FAILED",
                "driver_exit_code": 3,
                "message": "Job entrypoint command failed with exit code 3, last available "
                "logs (truncated to 20,000 chars):\nboom\n",
            },
            3,
            "the Ray job failed: Job entrypoint command failed with exit code 3, last "
            "available logs (truncated to 20,000 chars):",
        ),
        (
            {"status": "FAILED", "driver_exit_code": -9, "message": "x"},
            137,
            "the Ray job failed: x",
        ),
        ({"status": "FAILED", "message": None}, 1, "the Ray job failed: Ray gave no reason"),
        ({"status": "STOPPED"}, 1, "the Ray job was stopped"),
    ],
)
def test_a_finished_jobs_exit(info: dict[str, object], code: int, said: str | None) -> None:
    assert raydriver.job_exit(info) == (code, said)


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--ray", "r", "--run-id", "x", "--attempt", "0"],  # no entrypoint
        ["--ray", "r", "--attempt", "0", "--", "python t.py"],  # no run id
        ["--ray", "r", "--run-id", "x", "--attempt", "0", "--nope", "1", "--", "p"],
        ["--ray", "r", "--run-id", "x", "--attempt", "0", "--", "a", "b"],
    ],
)
def test_a_bad_driver_argv_is_refused(argv: list[str]) -> None:
    with pytest.raises(ValueError):
        raydriver.parse_argv(argv)


def test_cpus_round_up_to_whole_ones() -> None:
    assert [ray_cpus({"cpus": c}) for c in ("500m", 1, 2.5, "2", "1001m")] == [1, 1, 3, 2, 2]
    assert ray_cpus({}) is None and ray_cpus({"cpus": None}) is None


def test_one_node_only_and_only_through_the_driver() -> None:
    with pytest.raises(UsageError, match="single-node Ray cluster"):
        driver(nodes=2)
    with pytest.raises(UsageError, match="ray_command"):
        launch_command(
            "python t.py",
            launcher="ray",
            nodes=1,
            gpu_indices=[],
            procs_per_node=None,
            master_port=29500,
        )


def spec(**fields: object) -> TauSpec:
    return TauSpec.model_validate({"name": "a", "command": "x", "launcher": "ray", **fields})


def test_local_mode_runs_ray_where_it_is_installed_on_one_node() -> None:
    assert refusals(spec(), LOCAL) == []
    assert refusals(spec(nodes=2), LOCAL) == [SINGLE_NODE]
    assert refusal(spec(), LOCAL_WITHOUT_RAY) == INSTALL  # without Ray: how to get it, in one line
    assert refusals(TauSpec.model_validate({"name": "a", "command": "x", "nodes": 2}), LOCAL) == []
    assert Capabilities.from_dict(LOCAL.to_dict()) == LOCAL
    assert LOCAL.to_dict()["launchers"] == ["command", "ray", "torchrun"]


def test_the_executor_offers_ray_only_with_a_ray_beside_its_python(tmp_path: Path) -> None:
    missing = LocalExecutor(tmp_path / "runs", python=str(tmp_path / "bin" / "python"))
    assert missing.ray_cli is None and missing.capabilities == LOCAL_WITHOUT_RAY
    assert refusal(spec(), missing.capabilities) == INSTALL
    # Another interpreter with a ray CLI beside it (how a venv lays them out).
    (tmp_path / "bin").mkdir()
    cli = tmp_path / "bin" / "ray"
    cli.write_text("#!/bin/sh\n")
    cli.chmod(0o755)
    assert find_ray_cli(str(tmp_path / "bin" / "python")) == str(cli)
    if importlib.util.find_spec("ray") is None:
        pytest.skip("ray is not installed here (the extra taugrid[ray])")
    ours = LocalExecutor(tmp_path / "runs2", python=sys.executable)
    assert ours.capabilities == LOCAL
    assert ours.ray_cli is not None and os.access(ours.ray_cli, os.X_OK)


def test_a_temp_dir_left_by_a_killed_driver_goes_when_its_attempt_is_seen_ended(
    tmp_path: Path,
) -> None:
    run_id = f"left-{os.getpid()}-{os.urandom(3).hex()}"
    temp = Path(raydriver.temp_dir(run_id))
    temp.mkdir()
    try:
        (temp / "session_x").mkdir()
        os.utime(temp, (1_000, 1_000))
        # Made after the attempt ended: the next attempt's, kept.
        assert raydriver.remove_stale_temp(run_id, 999.0) is False and temp.is_dir()
        assert raydriver.remove_stale_temp(run_id, None) is False and temp.is_dir()
        assert raydriver.remove_stale_temp(run_id, 1_001.0) is True
        assert not temp.exists()
        # A link in its place leads nowhere.
        target = tmp_path / "elsewhere"
        target.mkdir()
        temp.symlink_to(target)
        assert raydriver.remove_stale_temp(run_id, 2e9) is False and target.is_dir()
    finally:
        if temp.is_symlink():
            temp.unlink()
        elif temp.exists():
            shutil.rmtree(temp)
