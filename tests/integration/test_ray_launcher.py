"""``launcher: ray`` in local mode through the real ``tau`` CLI and server, on a real Ray:
the run's own single-node cluster runs its command as a Ray job, the job's tasks see the
run's environment, its log is the run's log, its failure the run's, and a cancel leaves no
Ray process of the run behind (a /proc scan). Three Ray runs in all: Ray starts slowly on
a small machine. examples/ray-local is the successful one; the failing one runs in the
sandbox where bubblewrap is there (a --shared server's, docs/isolation.md)."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from tauproc import Tau, write_spec

from servicecheck import require_checkout_readable_by_run_uids, require_module, require_service
from taugrid.executors.local import raydriver
from taugrid.sdk import checkpoint as sdk_checkpoint

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ray-local"
RAY_WAIT_S = 170  # ray start alone takes 8-15 s on two busy cores
HEAD = re.compile(r"taugrid: Ray head started in [\d.]+s \(dashboard 127\.0\.0\.1:(\d+), ")


def need_ray() -> None:
    require_module("ray", "ray is not installed (the extra taugrid[ray]; make test installs it)")


def ray_processes(run_id: str) -> list[str]:
    """Every live process of the run's Ray cluster: its environment names the run (Ray's
    processes inherit the driver's) or its command line names the run's Ray temp dir."""
    temp = raydriver.temp_dir(run_id).encode()
    mark = f"TAU_RUN_ID={run_id}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
            cmdline = Path(f"/proc/{name}/cmdline").read_bytes()
            environ = Path(f"/proc/{name}/environ").read_bytes()
        except OSError:
            continue  # gone meanwhile
        if stat[stat.rfind(")") + 2] in "ZX":
            continue
        if mark in environ.split(b"\0") or temp in cmdline:
            shown = cmdline.replace(b"\0", b" ")[:160].decode(errors="replace")
            found.append(f"{name}: {shown}")
    return found


def assert_nothing_left(run_id: str) -> None:
    left = ray_processes(run_id)
    assert left == [], "Ray processes of the run left over:\n" + "\n".join(left)
    assert not os.path.lexists(raydriver.temp_dir(run_id))


def test_local_mode_refuses_ray_on_several_nodes(tau: Tau) -> None:
    need_ray()
    write_spec(tau.cwd, "name: rays\ncommand: python t.py\nlauncher: ray\nnodes: 2\n")
    proc = tau("run")
    assert proc.returncode == 2, proc.stdout
    assert proc.stderr == (
        "tau: nodes: 2: launcher: ray runs a single-node Ray cluster in local mode; use "
        "nodes: 1 (Ray spreads the job's tasks over the run's CPUs and GPUs) or the "
        "Kubernetes mode\n"
    )


@pytest.mark.timeout(240)
def test_the_example_runs_as_a_ray_job_with_the_runs_environment(tau: Tau) -> None:
    need_ray()
    proj = tau.cwd / "ray-local"
    shutil.copytree(EXAMPLE, proj)
    # `python` would be looked up on the server's PATH: this interpreter, with ray.
    run = tau.json("run", "--set", f"command={sys.executable} train.py", cwd=proj)["run"]
    done = tau.wait_state(run["id"], {"SUCCEEDED", "FAILED", "CANCELLED"}, timeout=RAY_WAIT_S)
    logs = tau("logs", run["id"], check=True).stdout
    assert done["state"] == "SUCCEEDED", logs
    assert done["attempt_list"][0]["exit_code"] == 0
    assert HEAD.search(logs) and "2 CPUs, 0 GPUs" in logs, logs
    # Ray ran the entrypoint in the run's workdir; each task saw the run's TAU_* env.
    workdir = tau.home / "runs" / run["id"] / "workdir"
    assert f"Running entrypoint for job tau-{run['id']}-0: cd {workdir} && " in logs, logs
    for i in range(8):
        assert f"task {i}: {i * i} (run {run['id']}, attempt 0)" in logs, logs
    assert "sum of squares 0..7: 140" in logs
    # The job's checkpoint is the run's (TAU_CHECKPOINT_DIR), as for any launcher.
    found = sdk_checkpoint.latest(root=tau.home / "runs" / run["id"] / "checkpoints")
    assert found is not None and found.step == 8
    assert json.loads((found.path / "state.json").read_text()) == {"next": 8, "sum": 140}
    assert_nothing_left(run["id"])


@pytest.mark.timeout(240)
def test_a_failing_entrypoint_fails_the_run_with_its_exit_code(tau: Tau) -> None:
    need_ray()
    sandboxed = shutil.which("bwrap") is not None
    if os.environ.get("TAU_REQUIRE_SERVICES") == "1":
        require_service(sandboxed, "bubblewrap (bwrap) is needed for a shared server's sandbox")
    if sandboxed:
        require_checkout_readable_by_run_uids()
    tau.start_server(*(["--isolation", "sandbox"] if sandboxed else []))
    script = "import os, sys; print('boom in', os.environ['TAU_RUN_NAME']); sys.exit(3)"
    spec = (
        f"name: rayfails\ncommand: {json.dumps(f'{sys.executable} -c {script!r}')}\n"
        "launcher: ray\nresources: {cpus: 1}\nsetup: echo setup-ran\n"
    )
    write_spec(tau.cwd, spec)
    run = tau.json("run")["run"]
    done = tau.wait_state(run["id"], {"SUCCEEDED", "FAILED", "CANCELLED"}, timeout=RAY_WAIT_S)
    logs = tau("logs", run["id"], check=True).stdout
    assert done["state"] == "FAILED", logs
    (attempt,) = done["attempt_list"]
    assert attempt["exit_code"] == 3 and attempt["reason"] == "ExitCode", attempt
    assert "setup-ran" in logs and "boom in rayfails" in logs, logs  # setup is the job's
    assert "taugrid: the Ray job failed: Job entrypoint command failed with exit code 3" in logs, (
        logs
    )
    assert_nothing_left(run["id"])


NAPS = """\
import signal, sys, time
import ray

def stop(signum, frame):
    print("entrypoint got SIGTERM", flush=True)
    sys.exit(0)

ray.init()
signal.signal(signal.SIGTERM, stop)  # after ray.init(), which installs a handler of its own

@ray.remote
def nap():
    print("task up", flush=True)
    time.sleep(600)

ref = nap.remote()
print("up", flush=True)
while True:
    time.sleep(0.1)
"""


@pytest.mark.timeout(240)
def test_cancel_stops_the_job_and_every_ray_process_of_the_run(tau: Tau) -> None:
    need_ray()
    (tau.cwd / "naps.py").write_text(NAPS)
    spec = f"name: raynaps\ncommand: {sys.executable} naps.py\nlauncher: ray\nstop_grace: 8s\n"
    write_spec(tau.cwd, spec)
    run = tau.json("run")["run"]
    deadline = time.monotonic() + RAY_WAIT_S
    logs = ""
    while "task up" not in logs:  # the task's print reaches the job's log through Ray
        assert time.monotonic() < deadline, logs
        time.sleep(0.5)
        logs = tau("logs", run["id"]).stdout
    assert "up" in logs.splitlines()
    running = ray_processes(run["id"])
    names = " ".join(running)
    for daemon in ("gcs_server", "raylet", "dashboard"):
        assert daemon in names, running
    # The cluster is the run's alone: Ray's token authentication, nothing without it.
    head = HEAD.search(logs)
    assert head, logs
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"http://127.0.0.1:{head.group(1)}/api/jobs/", timeout=10)
    refused.value.close()
    assert refused.value.code in (401, 403)

    t0 = time.monotonic()
    tau("cancel", run["id"], check=True)
    done = tau.wait_state(run["id"], {"CANCELLED", "FAILED", "SUCCEEDED"}, timeout=60)
    assert done["state"] == "CANCELLED"
    assert time.monotonic() - t0 < 8 + 10  # within the grace, and some
    logs = tau("logs", run["id"]).stdout
    assert "entrypoint got SIGTERM" in logs, logs  # the job's process had its stop signal
    assert_nothing_left(run["id"])
