"""GPU health end to end on this CPU machine with 4 declared GPUs, through the real server
and CLI: an injected Xid 79 takes the GPU out of service and moves the checkpointing run
on it to another GPU, from its last checkpoint before the fault, to the right result; a
run that needs that GPU waits until a person returns it; an Xid 13 (the application's
error) takes nothing out; and the GPU stays out across a server restart."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from tauproc import Tau

PY = sys.executable

# Checkpoints every 50 ms up to step 59, prints where it resumed and what it finished on.
TRAIN = """\
import os, time
from taugrid import checkpoint
ck = checkpoint.latest()
start = ck.step + 1 if ck else 0
gpu = os.environ["CUDA_VISIBLE_DEVICES"]
print(f"attempt {os.environ['TAU_ATTEMPT']} on GPU {gpu} from step {start}", flush=True)
for step in range(start, 60):
    with checkpoint.saving(step) as d:
        (d / "state.txt").write_text(str(step))
    time.sleep(0.05)
print(f"done at step {step} on GPU {gpu}", flush=True)
"""


def submit(tau: Tau, name: str, *args: str, code: str = TRAIN) -> str:
    run = tau.json("run", "--name", name, *args, "--set", "stop_grace=5s", "--", PY, "-c", code)
    return str(run["run"]["id"])


def gpus(tau: Tau) -> dict[int, dict[str, object]]:
    return {g["index"]: g for g in tau.json("gpus")["gpus"]}


def wait(what: str, check, timeout: float = 30.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_fault_moves_the_run_to_a_healthy_gpu_from_its_last_checkpoint(
    tau: Tau, tmp_path: Path
) -> None:
    tau.start_server("--gpus", "4")
    assert all(g["health"] == "healthy" for g in gpus(tau).values())
    run_id = submit(tau, "trains", "--gpus", "1")
    tau.wait_state(run_id, {"RUNNING"})
    wait("a few checkpoints", lambda: len(tau.json("status", run_id)["checkpoints"] or []) >= 3)
    first = tau.json("status", run_id)["attempt_list"][0]["placement"]["gpus"]
    (bad,) = first

    injected = tau("admin", "health", "inject", "--gpu", str(bad), "--xid", "79", check=True)
    assert "Xid 79" in injected.stdout and run_id in injected.stdout, injected.stdout
    out = gpus(tau)[bad]
    assert out["health"] == "quarantined" and "Xid 79" in str(out["reason"])

    done = tau.wait_state(run_id, {"SUCCEEDED"}, timeout=60)
    attempts = done["attempt_list"]
    assert len(attempts) == 2 and done["restarts"] == 0  # a hardware fault uses no restart
    assert attempts[0]["failure_class"] == "hardware" and attempts[0]["reason"] == "GpuFault"
    assert attempts[1]["placement"]["gpus"] != [bad]
    # Resumed from a checkpoint written before the fault, and finished the work.
    resumed = attempts[1]["resumed_from"]["step"]
    logs = tau("logs", run_id, check=True).stdout
    assert f"from step {resumed + 1}" in logs and "done at step 59" in logs, logs
    said = " ".join(e["message"] for e in done["events"])
    assert "Xid 79" in said and f"GPU {bad}" in said
    status = tau("status", run_id, check=True).stdout
    assert "Xid 79" in status

    # A run that needs all four GPUs waits while one is out, and runs once it is back.
    wide = submit(tau, "wide", "--gpus", "4", code="print('all four')")
    time.sleep(1.0)
    assert tau.json("status", wide)["state"] == "QUEUED"
    table = tau("gpus", check=True).stdout
    assert "QUARANTINED" in table and "Xid 79" in table, table

    # Out of service across a restart of the server, until a person returns it.
    tau.stop_server()
    tau.start_server("--gpus", "4")
    assert gpus(tau)[bad]["health"] == "quarantined"
    time.sleep(1.0)
    assert tau.json("status", wide)["state"] == "QUEUED"
    tau("admin", "health", "return", str(bad), check=True)
    assert gpus(tau)[bad]["health"] == "healthy"
    tau.wait_state(wide, {"SUCCEEDED"}, timeout=60)

    # The application's own error (Xid 13) takes nothing out of service.
    tau("admin", "health", "inject", "--gpu", "1", "--xid", "13", check=True)
    assert all(g["health"] == "healthy" for g in gpus(tau).values())
    events = tau.json("admin", "health", "events")["events"]
    kinds = [(e["xid"], e["outcome"]) for e in events]
    assert (13, "recorded") in kinds and (79, "applied") in kinds
    assert any(e["kind"] == "returned" for e in events)
    high = tau.json("admin", "health", "events", "--level", "3")["events"]
    assert all(e["level"] >= 3 for e in high) and high


def test_an_unknown_gpu_or_xid_is_refused_in_words(tau: Tau) -> None:
    tau.start_server("--gpus", "2")
    proc = tau("admin", "health", "inject", "--gpu", "7", "--xid", "79")
    assert proc.returncode != 0 and "no GPU 7" in proc.stderr and "Traceback" not in proc.stderr
    proc = tau("admin", "health", "return", "0")
    assert proc.returncode != 0 and "not out of service" in proc.stderr


def test_a_replayed_drill_goes_through_the_monitor_and_a_bad_one_is_refused(
    tau: Tau, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"kind": "xid", "gpu_uuid": "declared-1", "at": 1.0, "xid": 79}\n{oops\n')
    proc = tau("server", "start", "--gpus", "2", "--health-replay", str(bad))
    assert proc.returncode != 0 and f"{bad}:2: not JSON" in proc.stderr, proc.stderr
    drill = tmp_path / "drill.jsonl"
    drill.write_text(
        "# GPU 1 falls off the bus\n"
        f'{{"kind": "xid", "gpu_uuid": "declared-1", "at": {time.time()}, "xid": 79}}\n'
    )
    tau.start_server("--gpus", "2", "--health-replay", str(drill))
    wait("the drill's fault", lambda: gpus(tau)[1]["health"] == "quarantined")
    assert gpus(tau)[0]["health"] == "healthy"
    (event,) = tau.json("admin", "health", "events")["events"]
    assert event["source"] == "replay" and event["outcome"] == "applied"


def test_a_burst_trips_the_breaker_and_is_recorded_not_acted_on(tau: Tau) -> None:
    tau.start_server("--gpus", "4")  # the default breaker: 20 % of 4 GPUs, one take-out
    tau("admin", "health", "inject", "--gpu", "0", "--xid", "79", check=True)
    second = tau("admin", "health", "inject", "--gpu", "1", "--xid", "79", check=True)
    assert "breaker" in second.stdout and "circuit breaker open" in second.stdout
    health = {i: g["health"] for i, g in gpus(tau).items()}
    assert health == {0: "quarantined", 1: "healthy", 2: "healthy", 3: "healthy"}
    outcomes = [e["outcome"] for e in tau.json("admin", "health", "events")["events"]]
    assert outcomes[:2] == ["breaker", "applied"]
