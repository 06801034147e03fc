"""Every path of an attempt through the engine, on the fake executor: start, success,
failure with restart, preemption, lost, start failure, cancel before and after start,
a hardware stop that resumes before the fault."""

from __future__ import annotations

from pathlib import Path

from engine_world import World, make_world

from taugrid.domain.stops import StopReason


def test_a_run_starts_and_succeeds(world: World) -> None:
    rid = world.submit()
    world.step()
    assert world.state(rid) == "ADMITTED"
    (req,) = world.executor.launches
    assert req.run_id == rid and req.attempt == 0 and req.command == ["python", "train.py"]
    assert req.env["TAU_RUN_ID"] == rid and "TAU_RESUME_FROM" not in req.env
    world.executor.start(world.key(rid))
    world.step()
    assert world.state(rid) == "RUNNING"
    world.executor.exit(world.key(rid), 0)
    world.step()
    run = world.run(rid)
    assert run["state"] == "SUCCEEDED" and run["exit_code"] == 0
    assert world.reasons(rid)[-3:] == [
        ("ADMITTED", "Admitted"),
        ("RUNNING", "Started"),
        ("SUCCEEDED", "Completed"),
    ]


def test_a_failure_restarts_as_a_new_attempt_then_fails_for_good(world: World) -> None:
    rid = world.submit(restart={"max": 1, "on": ["error"], "backoff": "0s"})
    world.step()
    world.executor.exit(world.key(rid), 3)
    world.step()
    run = world.run(rid)  # backoff 0: requeued and admitted again in the same pass
    assert run["state"] == "ADMITTED" and run["restarts"] == 1 and run["attempt_count"] == 2
    assert world.reasons(rid)[-3:] == [
        ("RESTARTING", "ExitCode"),
        ("QUEUED", "Restarting"),
        ("ADMITTED", "Admitted"),
    ]
    world.executor.exit(world.key(rid), 3)
    world.step()
    run = world.run(rid)
    assert run["state"] == "FAILED" and "all 1 restarts used" in run["message"]
    attempts = world.store.attempts(rid)
    assert [a["failure_class"] for a in attempts] == ["exit_code", "exit_code"]


def test_preemption_requeues_without_using_a_restart(tmp_path: Path) -> None:
    w = make_world(tmp_path, gpus=1)
    low = w.submit("low", resources={"gpus": 1}, priority="low")
    w.step()
    w.executor.start(w.key(low))
    w.step()
    high = w.submit("high", resources={"gpus": 1}, priority="high")
    w.step(2)  # the scheduler asks for room; the stop is recorded, then sent
    assert w.executor.attempts[w.key(low)].stops == [StopReason.PREEMPT]
    w.step(2)
    run = w.run(low)
    assert run["state"] == "QUEUED" and run["restarts"] == 0 and run["stop_reason"] is None
    assert ("PREEMPTED", "Preempted") in w.reasons(low)
    assert w.store.attempts(low)[0]["stop_reason"] == "preempt"
    assert w.state(high) in ("ADMITTED", "RUNNING")


def test_a_lost_attempt_fails_or_restarts_as_an_error(world: World) -> None:
    rid = world.submit(restart={"max": 2, "on": ["error"], "backoff": "0s"})
    world.step()
    world.executor.start(world.key(rid))
    world.executor.lose(world.key(rid), "the supervisor vanished")
    world.step()
    assert world.run(rid)["restarts"] == 1
    assert world.store.attempts(rid)[0]["failure_class"] == "lost"


def test_a_launch_that_fails_fails_the_run_visibly(world: World) -> None:
    rid = world.submit(restart={"max": 3})
    world.executor.refuse[rid] = "image pull failed"
    world.step(2)
    run = world.run(rid)
    assert run["state"] == "FAILED" and run["reason"] == "StartFailed"
    assert "could not start: image pull failed" in run["message"]


def test_cancel_before_start_and_after_start(world: World) -> None:
    queued = world.submit("waiting", resources={"gpus": 2})
    running = world.submit("busy")
    world.cancel([queued])  # never launched: CANCELLED at once
    assert world.state(queued) == "CANCELLED"
    world.step()
    world.executor.start(world.key(running))
    world.step()
    world.cancel([running])
    world.step(2)
    assert world.executor.attempts[world.key(running)].stops == [StopReason.CANCEL]
    run = world.run(running)
    assert run["state"] == "CANCELLED" and run["restarts"] == 0


def test_cancel_of_an_admitted_attempt_not_yet_launched(world: World) -> None:
    rid = world.submit()
    world.executor.refuse[rid] = "never gets this far"
    # Admitted, and the launch has not happened (the server died in between).
    world.engine.starter.inline = False
    world.engine.starter.start = lambda run, attempt: None  # type: ignore[method-assign]
    world.step()
    assert world.state(rid) == "ADMITTED" and not world.executor.launches
    world.cancel([rid])
    world.step()
    assert world.state(rid) == "CANCELLED"


def test_a_hardware_stop_restarts_as_hardware_from_a_checkpoint_before_the_fault(
    world: World,
) -> None:
    rid = world.submit(
        restart={"max": 2, "on": ["hardware"], "backoff": "0s"}
    )  # not "error": it is not one
    world.step()
    world.executor.start(world.key(rid))
    world.step()
    fault_at = world.clock.now
    world.checkpoint(rid, 100, written_at=fault_at - 60)  # before the fault: trusted
    world.checkpoint(rid, 200, written_at=fault_at + 5)  # after it: maybe corrupt
    first_key = world.key(rid)
    assert world.engine.request_stop(rid, StopReason.HARDWARE, "Xid 79", fault_at=fault_at)
    world.step()
    assert world.executor.attempts[first_key].stops == [StopReason.HARDWARE]
    run = world.run(rid)  # stopped, restarted (no backoff) and admitted again in one pass
    assert run["state"] == "ADMITTED" and run["restarts"] == 0  # none of max used
    first = world.store.attempts(rid)[0]
    assert first["failure_class"] == "hardware" and first["reason"] == "GpuFault"
    assert first["fault_at"] == fault_at and first["stop_reason"] == "hardware"
    assert ("RESTARTING", "GpuFault") in world.reasons(rid)
    second = world.executor.launches[-1]
    assert second.attempt == 1
    assert second.env["TAU_RESUME_FROM"].endswith("step-0000000100")
    skipped = [e["message"] for e in world.store.events(rid) if e["reason"] == "CheckpointSkipped"]
    assert len(skipped) == 1 and "step 200" in skipped[0]


def test_a_workload_that_crashes_on_the_fault_is_still_a_hardware_failure(world: World) -> None:
    rid = world.submit(restart={"max": 1, "on": ["hardware"], "backoff": "0s"})
    world.step()
    world.executor.start(world.key(rid))
    world.step()
    world.executor.stop_ends_at_once = False
    world.engine.request_stop(rid, StopReason.HARDWARE, "Xid 48", fault_at=world.clock.now)
    world.step()
    world.executor.exit(world.key(rid), 134, signal=6)  # CUDA aborted before the SIGTERM
    world.step()
    assert world.store.attempts(rid)[0]["failure_class"] == "hardware"
    assert world.run(rid)["restarts"] == 0 and world.run(rid)["attempt_count"] == 2


def test_hardware_restarts_even_with_no_restarts_allowed(world: World) -> None:
    rid = world.submit()  # restart.max 0, on every group (the defaults)
    world.step()
    world.executor.start(world.key(rid))
    world.step()
    world.engine.request_stop(rid, StopReason.HARDWARE, "Xid 79", fault_at=world.clock.now)
    world.step(2)
    run = world.run(rid)
    assert run["attempt_count"] == 2 and run["restarts"] == 0
    assert world.store.attempts(rid)[0]["reason"] == "GpuFault"


def test_hardware_left_out_of_restart_on_fails_as_a_gpu_fault_not_the_users_error(
    world: World,
) -> None:
    rid = world.submit(restart={"max": 3, "on": ["error"]})
    world.step()
    world.executor.start(world.key(rid))
    world.step()
    world.engine.request_stop(rid, StopReason.HARDWARE, "Xid 79", fault_at=world.clock.now)
    world.step(2)
    run = world.run(rid)
    assert run["state"] == "FAILED" and run["reason"] == "GpuFault"
    assert "Xid 79" in run["message"]


def test_a_stop_is_sent_once_and_a_later_cancel_wins(world: World) -> None:
    world.executor.stop_ends_at_once = False
    rid = world.submit(restart={"max": 3})
    world.step()
    world.executor.start(world.key(rid))
    world.step()
    world.engine.request_stop(rid, StopReason.DRAIN, "node drained")
    world.step(3)
    assert world.executor.attempts[world.key(rid)].stops == [StopReason.DRAIN]
    world.cancel([rid])
    world.step()
    world.executor.finish_stops()
    world.step()
    run = world.run(rid)
    assert run["state"] == "CANCELLED"
