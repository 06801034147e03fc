"""observe.observe: a cluster attempt's objects as the engine's Observation (pure)."""

from __future__ import annotations

from typing import Any

from taugrid.domain.lifecycle import Phase
from taugrid.domain.stops import StopReason
from taugrid.executors.kubernetes.observe import AttemptObjects, observe, parse_time

T0 = 1_700_000_000.0


def job(*, suspend: bool = False, conditions: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "kind": "Job",
        "metadata": {"name": "r-a0", "namespace": "default"},
        "spec": {"suspend": suspend},
        "status": {"conditions": conditions or [], "startTime": "2023-11-14T22:13:20Z"},
    }


def pod(phase: str, rank: int = 0, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"r-a0-{rank}",
            "annotations": {"batch.kubernetes.io/job-completion-index": str(rank)},
        },
        "status": {"phase": phase, **status},
    }


def terminated(code: int, reason: str = "Error") -> dict[str, Any]:
    return {
        "containerStatuses": [
            {"name": "workload", "state": {"terminated": {"exitCode": code, "reason": reason}}}
        ]
    }


def waiting(reason: str, message: str = "") -> dict[str, Any]:
    return {
        "containerStatuses": [
            {"name": "workload", "state": {"waiting": {"reason": reason, "message": message}}}
        ]
    }


def obs(objects: AttemptObjects, stop: StopReason | None = None, now: float = T0 + 10):
    return observe(objects, stop, now, T0)


def test_a_suspended_job_waits_in_kueue_with_its_reason() -> None:
    kueue = {
        "status": {
            "conditions": [
                {
                    "type": "QuotaReserved",
                    "status": "False",
                    "reason": "WaitingForQuota",
                    "message": "no quota",
                }
            ]
        }
    }
    seen = obs(AttemptObjects("Job", job(suspend=True), kueue=kueue))
    assert seen.phase == Phase.STARTING
    assert seen.detail == "queued in Kueue: WaitingForQuota: no quota"
    assert "Workload" in (obs(AttemptObjects("Job", job(suspend=True))).detail or "")


def test_admitted_is_not_scheduled_and_scheduled_is_not_running() -> None:
    assert "Job controller" in (obs(AttemptObjects("Job", job())).detail or "")
    unsched = pod(
        "Pending",
        conditions=[
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/3 nodes",
            }
        ],
    )
    seen = obs(AttemptObjects("Job", job(), pods=[unsched]))
    assert seen.phase == Phase.STARTING
    assert "unschedulable: 0/3 nodes" in (seen.detail or "")
    pulling = pod("Pending", **waiting("ErrImagePull", "not found"))
    seen = obs(AttemptObjects("Job", job(), pods=[pulling], waiting_since={"r-a0-0": T0 + 9}))
    assert seen.phase == Phase.STARTING and "hint: check image:" in (seen.detail or "")
    running = pod("Running", startTime="2023-11-14T22:13:30Z")
    seen = obs(AttemptObjects("Job", job(), pods=[running]))
    assert seen.phase == Phase.RUNNING and seen.started_at == T0 + 10


def test_an_image_that_never_pulls_fails_after_its_grace() -> None:
    pulling = pod("Pending", **waiting("ImagePullBackOff", "repo does not exist"))
    early = obs(
        AttemptObjects("Job", job(), pods=[pulling], waiting_since={"r-a0-0": T0}), now=T0 + 299
    )
    assert early.phase == Phase.STARTING
    late = obs(
        AttemptObjects("Job", job(), pods=[pulling], waiting_since={"r-a0-0": T0}), now=T0 + 301
    )
    assert late.phase == Phase.EXITED and late.exit is not None
    assert late.exit.outcome == "failed" and "ImagePullBackOff" in (late.exit.error or "")


def test_a_complete_job_succeeded_and_a_failed_one_names_its_first_failed_rank() -> None:
    done = obs(AttemptObjects("Job", job(conditions=[{"type": "Complete", "status": "True"}])))
    assert done.phase == Phase.EXITED and done.exit is not None and done.exit.outcome == "succeeded"
    failed = job(
        conditions=[{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]
    )
    pods = [pod("Succeeded", 0, **terminated(0)), pod("Failed", 1, **terminated(137, "OOMKilled"))]
    seen = obs(AttemptObjects("Job", failed, pods=pods))
    assert seen.exit is not None
    assert (seen.exit.outcome, seen.exit.exit_code, seen.exit.oom) == ("failed", 137, True)
    assert seen.exit.detail == "pod r-a0-1 (rank 1)"


def test_a_deadline_is_a_timeout_not_a_failure_of_the_code() -> None:
    late = job(conditions=[{"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}])
    seen = obs(AttemptObjects("Job", late, pods=[pod("Failed", **terminated(143))]))
    assert seen.exit is not None and seen.exit.outcome == "timeout"


def test_a_stopped_attempt_ends_once_its_objects_and_pods_are_gone() -> None:
    going = obs(AttemptObjects("Job", None, pods=[pod("Running")]), stop=StopReason.PREEMPT)
    assert going.phase == Phase.RUNNING and "waiting for 1 pod" in (going.detail or "")
    gone = obs(AttemptObjects("Job", None), stop=StopReason.PREEMPT)
    assert gone.exit is not None
    assert (gone.exit.outcome, gone.exit.stop_reason) == ("cancelled", StopReason.PREEMPT)


def test_a_job_deleted_by_someone_else_is_lost() -> None:
    seen = obs(AttemptObjects("Job", None))
    assert seen.exit is not None and seen.exit.outcome == "lost"
    assert "deleted outside TauGrid" in (seen.exit.error or "")


def test_rayjob_states() -> None:
    def ray(**status: Any) -> dict[str, Any]:
        return {"kind": "RayJob", "spec": {}, "status": status}

    assert (
        obs(AttemptObjects("RayJob", ray(jobDeploymentStatus="Initializing"))).phase
        == Phase.STARTING
    )
    running = obs(AttemptObjects("RayJob", ray(jobDeploymentStatus="Running", jobStatus="RUNNING")))
    assert running.phase == Phase.RUNNING
    ok = obs(AttemptObjects("RayJob", ray(jobDeploymentStatus="Complete", jobStatus="SUCCEEDED")))
    assert ok.exit is not None and ok.exit.outcome == "succeeded"
    bad = obs(
        AttemptObjects(
            "RayJob",
            ray(
                jobDeploymentStatus="Failed", jobStatus="FAILED", reason="AppFailed", message="boom"
            ),
        )
    )
    assert (
        bad.exit is not None and bad.exit.outcome == "failed" and "boom" in (bad.exit.error or "")
    )


def test_parse_time() -> None:
    assert parse_time("2023-11-14T22:13:20Z") == T0
    assert parse_time("") is None and parse_time("yesterday") is None and parse_time(None) is None
