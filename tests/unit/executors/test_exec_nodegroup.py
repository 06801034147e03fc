"""``nodes: N`` in local mode with real processes: the supervisor runs every node as the
cluster's Indexed Job runs each pod, and the attempt as one unit (nodegroup.py)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from test_exec_supervisor import ENV, output, run, wait_for, wait_phase, write_launch

from taugrid.domain.stops import StopReason
from taugrid.executors.local.executor import LocalExecutor
from taugrid.executors.local.launch import launch_nodes
from taugrid.executors.local.process import (
    pid_alive,
    read_status,
    request_cancel,
    start_supervisor,
)
from taugrid.ports.executor import AttemptKey, LaunchRequest, Placement

PRINT_ENV = (
    "echo rank=$NODE_RANK addr=$MASTER_ADDR port=$MASTER_PORT nnodes=$NNODES "
    "world=$WORLD_SIZE backend=$TAU_DIST_BACKEND gpus=$CUDA_VISIBLE_DEVICES "
    "run=$TAU_RUN_ID ckpt=$TAU_CHECKPOINT_DIR"
)
LINE = re.compile(
    r"\[node (\d)\] rank=(\d) addr=(\S+) port=(\d+) nnodes=(\d) world=(\d) "
    r"backend=(\w+) gpus=(\S*) run=(\S*) ckpt=(\S*)"
)
# Each node says its pid (the shell's, which then becomes the sleep) and waits.
SAY_PID_AND_SLEEP = 'echo "pid=$$"; exec sleep 60'


def nodes_launch(
    tmp_path: Path, command: str, nodes: int = 2, gpus: tuple[int, ...] = (), **fields: Any
) -> Path:
    """An attempt of ``nodes`` nodes running ``command`` (launcher: command)."""
    per_node = launch_nodes(
        ["sh", "-c", command],
        launcher="command",
        nodes=nodes,
        gpu_indices=gpus,
        procs_per_node=None,
        master_port=29555,
    )
    fields.setdefault("nodes", [{"command": n.command, "env": n.env} for n in per_node])
    return write_launch(tmp_path, ["sh", "-c", command], **fields)


def node_pids(attempt: Path, count: int) -> dict[int, int]:
    """node -> the pid it printed, once every node has."""
    found: dict[int, int] = {}

    def every_node_said() -> bool:
        found.clear()
        log = attempt / "output.log"
        text = log.read_text() if log.exists() else ""
        for m in re.finditer(r"^\[node (\d)\] pid=(\d+)$", text, re.M):
            found[int(m.group(1))] = int(m.group(2))
        return len(found) == count

    wait_for(every_node_said, 10, "every node's pid")
    return dict(found)


def wait_gone(pids: list[int], timeout: float = 5.0) -> None:
    wait_for(lambda: not any(pid_alive(p) for p in pids), timeout, f"{pids} to be gone")


def test_every_node_gets_the_indexed_jobs_environment_and_its_gpus(tmp_path: Path) -> None:
    ex = LocalExecutor(tmp_path / "runs")
    ex.workdir("r-nodes").mkdir(parents=True)  # as unpacked from the run's snapshot
    env = {**ENV, "TAU_RUN_ID": "r-nodes", "TAU_CHECKPOINT_DIR": "/ckpt"}
    env["CUDA_VISIBLE_DEVICES"] = "0,1,2,3"  # the run's (domain.workload_env): every GPU
    ex.launch(
        LaunchRequest(
            run_id="r-nodes",
            attempt=0,
            snapshot_digest="unused",
            command=PRINT_ENV,
            setup=None,
            env=env,
            stop_grace_s=1.0,
            timeout_s=None,
            nodes=2,
            resources={"gpus": 2},
            placement=Placement("default", (0, 1, 2, 3)),
        )
    )
    attempt = ex.attempt_dir("r-nodes", 0)
    status = wait_phase(attempt, "exited", timeout=15)
    assert (status["outcome"], status["exit_code"], status["failed_node"]) == ("succeeded", 0, None)
    assert [(n["node"], n["outcome"]) for n in status["nodes"]] == [
        (0, "succeeded"),
        (1, "succeeded"),
    ]
    lines = output(attempt).splitlines()
    assert len(lines) == 2 and all(LINE.fullmatch(line) for line in lines), lines
    seen, ports = {}, set()
    for line in lines:
        m = LINE.fullmatch(line)
        assert m is not None
        prefix, rank, addr, port, nnodes, world, backend, gpus, run_id, ckpt = m.groups()
        assert prefix == rank  # each line says the node it came from
        seen[rank] = gpus
        assert (addr, nnodes, world, backend) == ("127.0.0.1", "2", "4", "nccl")
        assert (run_id, ckpt) == ("r-nodes", "/ckpt")  # the run's TAU_* on every node
        ports.add(port)
    assert seen == {"0": "0,1", "1": "2,3"}  # each node its own slice of the placement
    assert len(ports) == 1
    (obs,) = ex.observe_many([AttemptKey("r-nodes", 0)]).values()
    assert obs.exit is not None and obs.exit.outcome == "succeeded"


def test_same_master_for_every_node(tmp_path: Path) -> None:
    status, attempt = run(tmp_path, ["true"], **_nodes_fields(PRINT_ENV, nodes=3))
    assert status["outcome"] == "succeeded"
    found = [LINE.fullmatch(x) for x in output(attempt).splitlines()]
    assert sorted(m.group(2) for m in found if m) == ["0", "1", "2"]
    assert {(m.group(3), m.group(4), m.group(5), m.group(6)) for m in found if m} == {
        ("127.0.0.1", "29555", "3", "3")
    }
    assert {m.group(7) for m in found if m} == {"gloo"}  # no GPUs


def _nodes_fields(command: str, nodes: int) -> dict[str, Any]:
    per_node = launch_nodes(
        ["sh", "-c", command],
        launcher="command",
        nodes=nodes,
        gpu_indices=(),
        procs_per_node=None,
        master_port=29555,
    )
    return {"nodes": [{"command": n.command, "env": n.env} for n in per_node]}


@pytest.mark.parametrize("fork_server", ["1", "0"])
def test_a_failing_node_stops_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fork_server: str
) -> None:
    # Also as `python -I -S supervisor.py`: nodegroup imports that very module.
    monkeypatch.setenv("TAU_SUPERVISOR_FORK_SERVER", fork_server)
    fail_later = 'if [ "$NODE_RANK" = 1 ]; then echo "pid=$$"; sleep 1; exit 3; fi; '
    attempt = nodes_launch(tmp_path, fail_later + SAY_PID_AND_SLEEP, nodes=3)
    start_supervisor(attempt)
    pids = node_pids(attempt, 3)
    t0 = time.monotonic()
    status = wait_phase(attempt, "exited", timeout=15)
    took = time.monotonic() - t0
    assert took < 5, took  # not the 60 s the other nodes were sleeping
    assert not pid_alive(pids[0]) and not pid_alive(pids[2])
    assert (status["outcome"], status["exit_code"], status["signal"]) == ("failed", 3, None)
    assert status["failed_node"] == 1
    words = "node 1 of 3 failed first (exited with code 3); nodes 0 and 2 were stopped"
    assert status["detail"] == words
    assert f"taugrid: {words}\n" in output(attempt)
    ends = {n["node"]: (n["outcome"], n["exit_code"]) for n in status["nodes"]}
    assert ends == {0: ("cancelled", 143), 1: ("failed", 3), 2: ("cancelled", 143)}


def test_cancel_stops_every_node(tmp_path: Path) -> None:
    attempt = nodes_launch(tmp_path, SAY_PID_AND_SLEEP)
    start_supervisor(attempt)
    pids = node_pids(attempt, 2)
    running = wait_phase(attempt, "running")
    assert [n["node"] for n in running["nodes"]] == [0, 1]
    assert running["pid"] == running["nodes"][0]["pid"]
    assert request_cancel(attempt, StopReason.PREEMPT.value)
    status = wait_phase(attempt, "exited", timeout=10)
    wait_gone(list(pids.values()))
    assert (status["outcome"], status["stop_reason"], status["failed_node"]) == (
        "cancelled",
        "preempt",
        None,
    )
    assert [n["signal"] for n in status["nodes"]] == [15, 15]


def test_timeout_stops_every_node(tmp_path: Path) -> None:
    attempt = nodes_launch(tmp_path, SAY_PID_AND_SLEEP, timeout_s=1.0)
    start_supervisor(attempt)
    pids = node_pids(attempt, 2)
    status = wait_phase(attempt, "exited", timeout=10)
    wait_gone(list(pids.values()))
    assert status["outcome"] == "timeout"


def test_a_node_ignoring_sigterm_gets_sigkill_after_the_grace(tmp_path: Path) -> None:
    ignores = "trap '' TERM; echo \"pid=$$\"; while :; do sleep 0.1; done"
    attempt = nodes_launch(tmp_path, ignores, stop_grace_s=0.5)
    start_supervisor(attempt)
    pids = node_pids(attempt, 2)
    request_cancel(attempt)
    status = wait_phase(attempt, "exited", timeout=10)
    wait_gone(list(pids.values()))
    assert status["outcome"] == "cancelled"
    assert [(n["exit_code"], n["signal"]) for n in status["nodes"]] == [(137, 9), (137, 9)]


def test_every_node_dies_with_the_supervisor(tmp_path: Path) -> None:
    attempt = nodes_launch(tmp_path, SAY_PID_AND_SLEEP)
    supervisor = start_supervisor(attempt)
    pids = node_pids(attempt, 2)
    os.kill(supervisor, signal.SIGKILL)
    wait_gone(list(pids.values()))  # PR_SET_PDEATHSIG, node supervisor and workload


def test_a_node_that_cannot_start_fails_the_attempt_naming_it(tmp_path: Path) -> None:
    nodes = [
        {"command": ["sh", "-c", SAY_PID_AND_SLEEP], "env": {"NODE_RANK": "0"}},
        {"command": ["no-such-command-tau"], "env": {"NODE_RANK": "1"}},
    ]
    status, attempt = run(tmp_path, ["true"], nodes=nodes)
    assert (status["outcome"], status["exit_code"], status["failed_node"]) == ("failed", 127, 1)
    assert status["error"].startswith("node 1: cannot start the workload")
    assert "[node 1] taugrid: cannot start the workload" in output(attempt)


def test_lines_of_nodes_never_mix(tmp_path: Path) -> None:
    # Each line goes out in two writes; the nodes write at once, as fast as they can.
    script = (
        "import os, sys\n"
        "r = os.environ['NODE_RANK']\n"
        "for i in range(2000):\n"
        "    os.write(1, (r * 40).encode())\n"
        "    os.write(1, (r * 40 + f' {i}\\n').encode())\n"
        "os.write(1, b'no newline at the end')\n"
    )
    nodes = [
        {"command": [sys.executable, "-c", script], "env": {"NODE_RANK": str(i)}} for i in range(3)
    ]
    status, attempt = run(tmp_path, ["true"], nodes=nodes)
    assert status["outcome"] == "succeeded"
    lines = output(attempt).splitlines()
    assert len(lines) == 3 * 2001
    for i in range(3):
        mine = [x for x in lines if x.startswith(f"[node {i}] ")]
        body = f"[node {i}] " + str(i) * 80
        assert mine[:-1] == [f"{body} {k}" for k in range(2000)]
        assert mine[-1] == f"[node {i}] no newline at the end"


def test_secrets_are_masked_on_every_node(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("s3cr3t-value-x")
    secret.chmod(0o600)
    status, attempt = run(
        tmp_path,
        ["true"],
        secret_files={"TOKEN": str(secret)},
        **_nodes_fields('echo "token=$TOKEN"', nodes=2),
    )
    assert status["outcome"] == "succeeded"
    assert sorted(output(attempt).splitlines()) == ["[node 0] token=***", "[node 1] token=***"]


def test_outputs_of_every_node_are_copied_once(tmp_path: Path) -> None:
    write = "mkdir -p out && echo $NODE_RANK > out/from-$NODE_RANK"
    status, _ = run(tmp_path, ["true"], outputs=["out/", "missing/"], **_nodes_fields(write, 2))
    assert status["outcome"] == "succeeded"
    assert status["missing_outputs"] == ["missing/"]
    out = tmp_path / "outputs" / "out"
    assert sorted(p.name for p in out.iterdir()) == ["from-0", "from-1"]


def test_the_disk_limit_stops_every_node(tmp_path: Path) -> None:
    grow = 'if [ "$NODE_RANK" = 1 ]; then head -c 3000000 /dev/zero > big; fi; ' + SAY_PID_AND_SLEEP
    attempt = nodes_launch(tmp_path, grow, disk_limit_bytes=1_000_000)
    start_supervisor(attempt)
    pids = node_pids(attempt, 2)
    status = wait_phase(attempt, "exited", timeout=15)
    wait_gone(list(pids.values()))
    assert status["outcome"] == "disk_limit" and status["failed_node"] is None
    assert "over its disk limit" in status["detail"]


def test_one_node_writes_exactly_what_it_did_before(tmp_path: Path) -> None:
    status, attempt = run(tmp_path, ["sh", "-c", "echo out; printf tail"])
    assert output(attempt) == "out\ntail"  # no prefix, no pipe, nothing added
    assert "nodes" not in status and "failed_node" not in status
    assert read_status(attempt) == status


CANCEL_WHILE_STARTING = """
import sys
from taugrid.executors.local import proctree, supervisor

asked = []


class Supervisor(supervisor.Supervisor):
    def cancel_requested(self) -> bool:  # run()'s check, node 0's start: no; then yes
        asked.append(1)
        return len(asked) > 2 or super().cancel_requested()


proctree.become_subreaper()
sys.exit(Supervisor(sys.argv[1]).run())
"""


def test_a_cancel_while_the_nodes_start_stops_those_started(tmp_path: Path) -> None:
    attempt = nodes_launch(tmp_path, SAY_PID_AND_SLEEP, nodes=3)
    t0 = time.monotonic()
    subprocess.run(
        [sys.executable, "-c", CANCEL_WHILE_STARTING, str(attempt)], check=True, timeout=30
    )
    status = read_status(attempt)
    assert status is not None and time.monotonic() - t0 < 10
    assert (status["outcome"], status["failed_node"]) == ("cancelled", None)
    assert [n["node"] for n in status["nodes"]] == [0]  # nodes 1 and 2 never started
