"""``nodes: 2`` in local mode through the real ``tau`` CLI and server: admission gives the
run nodes x gpus GPUs, each node its slice; every node runs as a pod of the cluster's
Indexed Job would; a failing node stops the others; the sandbox holds for every node;
and examples/multinode-gloo trains one world of four ranks on gloo over two nodes."""

from __future__ import annotations

import json
import re
import shutil
import sys
import time
from pathlib import Path

import pytest
from tauproc import Tau, write_spec

from servicecheck import require_bwrap, require_module
from taugrid.sdk import checkpoint as sdk_checkpoint

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "multinode-gloo"
PRINT_ENV = (
    "echo rank=$NODE_RANK master=$MASTER_ADDR:$MASTER_PORT nnodes=$NNODES "
    "world=$WORLD_SIZE gpus=$CUDA_VISIBLE_DEVICES backend=$TAU_DIST_BACKEND"
)


def test_two_nodes_share_the_runs_gpus_and_its_rendezvous(tau: Tau) -> None:
    tau.start_server("--gpus", "4")
    spec = (
        f"name: two\ncommand: {PRINT_ENV!r}\nnodes: 2\nresources: {{gpus: 2}}\nlauncher: command\n"
    )
    write_spec(tau.cwd, spec)
    run = tau.json("run")["run"]
    done = tau.wait_state(run["id"], {"SUCCEEDED", "FAILED"})
    assert done["state"] == "SUCCEEDED", tau("logs", run["id"]).stdout
    (attempt,) = done["attempt_list"]
    assert sorted(attempt["placement"]["gpus"]) == [0, 1, 2, 3]  # nodes x gpus
    lines = sorted(tau("logs", run["id"], check=True).stdout.splitlines())
    port = re.search(r"master=127\.0\.0\.1:(\d+)", lines[0])
    assert port is not None
    gpus = attempt["placement"]["gpus"]
    assert lines == [
        f"[node {i}] rank={i} master=127.0.0.1:{port.group(1)} nnodes=2 world=4 "
        f"gpus={gpus[2 * i]},{gpus[2 * i + 1]} backend=nccl"
        for i in (0, 1)
    ]


def test_a_failing_node_fails_the_run_and_stops_the_other(tau: Tau) -> None:
    command = 'if [ "$NODE_RANK" = 1 ]; then sleep 0.5; exit 4; fi; exec sleep 60'
    write_spec(tau.cwd, f"name: fails\ncommand: {command!r}\nnodes: 2\nstop_grace: 5s\n")
    run = tau.json("run")["run"]
    t0 = time.monotonic()
    done = tau.wait_state(run["id"], {"SUCCEEDED", "FAILED", "CANCELLED"})
    assert time.monotonic() - t0 < 20  # not node 0's 60 s
    assert done["state"] == "FAILED"
    (attempt,) = done["attempt_list"]
    assert attempt["exit_code"] == 4
    logs = tau("logs", run["id"], check=True).stdout
    assert "taugrid: node 1 of 2 failed first (exited with code 4); node 0 was stopped" in logs
    adir = tau.home / "runs" / run["id"] / "attempts" / "0"
    status = json.loads((adir / "status.json").read_text())
    assert status["failed_node"] == 1


def test_cancel_stops_every_node(tau: Tau) -> None:
    write_spec(tau.cwd, "name: sleeps\ncommand: 'echo up; exec sleep 60'\nnodes: 2\n")
    run = tau.json("run")["run"]
    tau.wait_state(run["id"], {"RUNNING"})
    adir = tau.home / "runs" / run["id"] / "attempts" / "0"
    deadline = time.monotonic() + 20
    while tau("logs", run["id"]).stdout.count("up") < 2:
        assert time.monotonic() < deadline, tau("logs", run["id"]).stdout
        time.sleep(0.05)
    pids = [n["pid"] for n in json.loads((adir / "status.json").read_text())["nodes"]]
    tau("cancel", run["id"], check=True)
    done = tau.wait_state(run["id"], {"CANCELLED", "FAILED", "SUCCEEDED"})
    assert done["state"] == "CANCELLED"
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text()


def test_every_node_runs_in_the_sandbox(tau: Tau, tmp_path: Path) -> None:
    require_bwrap()
    tau.start_server("--isolation", "sandbox")
    # In the sandbox pid 1 is bubblewrap's; TAU_HOME (the server's files) is hidden.
    command = (
        "echo rank=$NODE_RANK init=$(tr '\\0' ' ' < /proc/1/cmdline | cut -d' ' -f1) "
        "token=$(test -e $SERVER_HOME/token && echo visible || echo hidden)"
    )
    spec = f"name: boxed\ncommand: {command!r}\nnodes: 2\nenv: {{SERVER_HOME: {tau.home}}}\n"
    write_spec(tau.cwd, spec)
    run = tau.json("run")["run"]
    done = tau.wait_state(run["id"], {"SUCCEEDED", "FAILED"})
    logs = tau("logs", run["id"], check=True).stdout
    assert done["state"] == "SUCCEEDED", logs
    lines = sorted(logs.splitlines())
    assert len(lines) == 2, logs
    for i, line in enumerate(lines):
        assert re.fullmatch(rf"\[node {i}\] rank={i} init=\S*/bwrap token=hidden", line), line

    # A failing node stops the other in its sandbox too, with a grace (not bwrap's SIGKILL).
    command = (
        "trap 'echo stopped; exit 0' TERM; echo up; "
        'if [ "$NODE_RANK" = 1 ]; then sleep 1; exit 5; fi; while :; do sleep 0.1; done'
    )
    write_spec(tau.cwd / "fails", f"name: boxfail\ncommand: {json.dumps(command)}\nnodes: 2\n")
    run = tau.json("run", cwd=tau.cwd / "fails")["run"]
    done = tau.wait_state(run["id"], {"SUCCEEDED", "FAILED", "CANCELLED"})
    logs = tau("logs", run["id"], check=True).stdout
    assert done["state"] == "FAILED" and done["attempt_list"][0]["exit_code"] == 5, logs
    assert "[node 0] stopped" in logs and "node 1 of 2 failed first" in logs

    # Outputs are copied once for all nodes, by the sandbox's copy: a link node 1 planted
    # in TAU_OUTPUT_DIR leads the (root) supervisor nowhere (tests/integration/
    # test_sandbox_outputs.py has it for one node).
    target = tmp_path / "not-the-runs"
    target.mkdir()
    command = (
        "mkdir -p out && echo $NODE_RANK > out/from-$NODE_RANK && "
        f'if [ "$NODE_RANK" = 1 ]; then ln -s {target} $TAU_OUTPUT_DIR/out; fi'
    )
    spec = f"name: boxout\ncommand: {json.dumps(command)}\nnodes: 2\noutputs: [out]\n"
    write_spec(tau.cwd / "outs", spec)
    run = tau.json("run", cwd=tau.cwd / "outs")["run"]
    done = tau.wait_state(run["id"], {"SUCCEEDED", "FAILED", "CANCELLED"})
    assert done["state"] == "SUCCEEDED", tau("logs", run["id"]).stdout
    assert list(target.iterdir()) == []


@pytest.mark.timeout(180)
def test_the_multinode_gloo_example_is_one_world(tau: Tau) -> None:
    require_module("torch", "torch is not installed (make test installs the torch extra)")
    proj = tau.cwd / "multinode"
    shutil.copytree(EXAMPLE, proj)
    # `python` would be looked up on the server's PATH: this interpreter, with torch.
    run = tau.json("run", "--set", f"command={sys.executable} train.py", cwd=proj)["run"]
    done = tau.wait_state(run["id"], {"SUCCEEDED", "FAILED", "CANCELLED"}, timeout=150)
    logs = tau("logs", run["id"], check=True).stdout
    assert done["state"] == "SUCCEEDED", logs
    assert "[node 0] all_reduce sum 10 over 4 ranks (expected 10)" in logs
    ranks = sorted(re.findall(r"^\[node (\d)\] rank (\d)/4 on node (\d) of 2", logs, re.M))
    assert ranks == [("0", "0", "0"), ("0", "1", "0"), ("1", "2", "1"), ("1", "3", "1")]
    ckpt, _ = sdk_checkpoint.newest_verified(tau.home / "runs" / run["id"] / "checkpoints")
    assert ckpt is not None and ckpt.step == 1
