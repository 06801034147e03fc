"""Kueue Workload conditions and kubelet pod states in TauGrid's words (pure)."""

from __future__ import annotations

from typing import Any

from taugrid.domain.outcomes import classify_exit
from taugrid.domain.states import Reason
from taugrid.executors.kubernetes.status import (
    admission_events,
    pending_words,
    pod_view,
    start_blocked,
    workload_view,
)
from taugrid.ports.admission import AdmissionKind


def cond(type_: str, status: str, reason: str = "", message: str = "") -> dict[str, str]:
    return {"type": type_, "status": status, "reason": reason, "message": message}


def workload(*conditions: dict[str, str], **status: Any) -> dict[str, Any]:
    return {"status": {"conditions": list(conditions), **status}}


PENDING = workload(
    cond(
        "QuotaReserved",
        "False",
        "Pending",
        "couldn't assign flavors to pod set main: "
        "insufficient unused quota for nvidia.com/gpu in flavor h100, 4 more needed",
    )
)
ADMISSION = {
    "clusterQueue": "research",
    "podSetAssignments": [{"name": "main", "flavors": {"nvidia.com/gpu": "h100", "cpu": "h100"}}],
}
ADMITTED = workload(
    cond("QuotaReserved", "True", "QuotaReserved"),
    cond("Admitted", "True", "Admitted"),
    admission=ADMISSION,
)
PREEMPTED = workload(
    cond("QuotaReserved", "False", "Pending"),
    cond("Admitted", "False", "NoReservation"),
    cond(
        "Evicted",
        "True",
        "Preempted",
        "Preempted to accommodate a workload (UID: 1) due to prioritization in the ClusterQueue",
    ),
    cond("Preempted", "True", "InClusterQueue", "Preempted to accommodate a workload"),
    requeueState={"count": 1},
)
TIMED_OUT = workload(
    cond("Evicted", "True", "PodsReadyTimeout", "Exceeded the PodsReady timeout default/job"),
    cond("QuotaReserved", "False", "Pending"),
)


def test_admission_is_an_edge_with_the_flavor_kueue_assigned() -> None:
    pending, admitted = workload_view(PENDING), workload_view(ADMITTED)
    assert admission_events("r", None, pending) == []
    (event,) = admission_events("r", pending, admitted)
    assert event.kind is AdmissionKind.ADMITTED
    assert event.placement is not None and event.placement.flavor == "h100"
    assert "cluster queue research" in event.message
    assert admission_events("r", admitted, admitted) == []  # a resync reports nothing new


def test_a_preemption_is_never_a_failure_and_other_evictions_say_why() -> None:
    admitted = workload_view(ADMITTED)
    (pre,) = admission_events("r", admitted, workload_view(PREEMPTED))
    assert pre.kind is AdmissionKind.PREEMPTED and "InClusterQueue" in pre.message
    (ev,) = admission_events("r", admitted, workload_view(TIMED_OUT))
    assert ev.kind is AdmissionKind.EVICTED
    assert ev.message.startswith("evicted by Kueue (PodsReadyTimeout): Exceeded the PodsReady")
    # Readmitted after the eviction: a new admission edge.
    (again,) = admission_events("r", workload_view(PREEMPTED), admitted)
    assert again.kind is AdmissionKind.ADMITTED


def test_why_a_workload_waits_in_words() -> None:
    assert pending_words(workload_view(ADMITTED)) is None
    words = pending_words(workload_view(PENDING))
    assert words is not None and words.startswith("Pending: couldn't assign flavors")
    assert pending_words(workload_view(PREEMPTED)) == "Pending (requeued 1 times)"
    assert pending_words(workload_view(workload())) == "waiting for Kueue to look at it"


def pod(phase: str, **status: Any) -> dict[str, Any]:
    return {"status": {"phase": phase, **status}}


def main(state: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"name": "workload", "state": state}]


def test_oomkilled_and_exit_codes_classify_as_locally() -> None:
    oom = pod_view(
        pod(
            "Failed",
            containerStatuses=main({"terminated": {"exitCode": 137, "reason": "OOMKilled"}}),
        )
    )
    assert oom.exit is not None and classify_exit(oom.exit).reason is Reason.OOM_KILLED
    failed = pod_view(pod("Failed", containerStatuses=main({"terminated": {"exitCode": 3}})))
    assert failed.exit is not None
    verdict = classify_exit(failed.exit)
    assert verdict.reason is Reason.EXIT_CODE and verdict.message == "exited with code 3"
    ok = pod_view(pod("Succeeded", containerStatuses=main({"terminated": {"exitCode": 0}})))
    assert ok.exit is not None and classify_exit(ok.exit).reason is Reason.COMPLETED
    assert pod_view(pod("Running", containerStatuses=main({"running": {}}))).exit is None


def test_a_container_that_cannot_start_fails_after_its_grace_only() -> None:
    pulling = pod_view(
        pod(
            "Pending",
            containerStatuses=main(
                {
                    "waiting": {
                        "reason": "ImagePullBackOff",
                        "message": 'Back-off pulling image "ghcr.io/acme/trian:1"',
                    }
                }
            ),
        )
    )
    assert pulling.waiting == "ImagePullBackOff"
    assert start_blocked(pulling, waited_s=30) is None  # registries hiccup
    failed = start_blocked(pulling, waited_s=301)
    assert failed is not None
    verdict = classify_exit(failed)
    assert verdict.reason is Reason.START_FAILED
    assert "ImagePullBackOff" in verdict.message and "trian:1" in verdict.message
    config = pod_view(
        pod(
            "Pending",
            containerStatuses=main(
                {
                    "waiting": {
                        "reason": "CreateContainerConfigError",
                        "message": "couldn't find key hf-token in Secret vision/taugrid-secrets",
                    }
                }
            ),
        )
    )
    assert start_blocked(config, 10) is None and start_blocked(config, 61) is not None


def test_unschedulable_is_waiting_in_words_never_a_failure() -> None:
    view = pod_view(
        pod(
            "Pending",
            conditions=[
                cond(
                    "PodScheduled",
                    "False",
                    "Unschedulable",
                    "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.",
                )
            ],
        )
    )
    assert (view.waiting, view.exit) == ("Unschedulable", None)
    assert "Insufficient nvidia.com/gpu" in view.waiting_message
    assert start_blocked(view, waited_s=10_000) is None


def test_a_failed_init_container_says_which_and_why() -> None:
    view = pod_view(
        pod(
            "Failed",
            initContainerStatuses=[
                {
                    "name": "fetch-code",
                    "state": {
                        "terminated": {
                            "exitCode": 1,
                            "message": "tau: the server refused the code snapshot\n",
                        }
                    },
                }
            ],
        )
    )
    assert view.exit is not None
    assert view.exit.error == (
        "init container fetch-code exited with code 1: tau: the server refused the code snapshot"
    )
    assert classify_exit(view.exit).reason is Reason.START_FAILED
