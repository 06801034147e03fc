"""What Kueue's Workloads and the kubelet's Pods say about an attempt, in TauGrid's
terms. Pure functions over the objects as plain dicts (what the informers cache); the
executor and the admission source apply the results.

Workloads (``shared/reference/kueue-kuberay-contract.md``, v1beta2):
- ``QuotaReserved`` + ``Admitted`` True: admitted, with the cluster queue and the
  flavor of each pod set from ``status.admission``;
- ``Evicted`` True: the attempt must stop and go back to its queue. With reason
  ``Preempted`` (and ``Preempted`` True with its own reason) it is a preemption, never
  a failure; every other eviction (PodsReadyTimeout, NodeFailures, a stopped queue...)
  is an eviction whose words say why;
- pending: the ``QuotaReserved`` False reason and message (``WaitingForQuota``,
  ``NoMatchingFlavor``, ``Misconfigured``...), and the requeue count.

Pods: the phase, and a container's state. ``OOMKilled`` is an OOM kill (the kernel's,
as the kubelet saw it), an exit code is an exit code; a container that cannot start
(``ImagePullBackOff``, ``ErrImagePull``, ``CreateContainerConfigError``,
``InvalidImageName``) fails the attempt once it has waited past a grace period (the
kubelet retries forever, a researcher should not wait forever); ``Unschedulable`` is
waiting, in words, and never a failure by itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from taugrid.domain.outcomes import AttemptExit
from taugrid.ports.admission import AdmissionEvent, AdmissionKind
from taugrid.ports.executor import Placement

# Kubelet waiting reasons that no retry by itself will cure, with how long to wait.
START_BLOCKERS: Mapping[str, float] = {
    "ImagePullBackOff": 300.0,  # a registry hiccup heals in minutes; a typo never
    "ErrImagePull": 300.0,
    "InvalidImageName": 0.0,
    "CreateContainerConfigError": 60.0,  # a Secret created a moment late is fine
    "CreateContainerError": 60.0,
}


def _conditions(obj: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    status = obj.get("status") or {}
    return {c.get("type", ""): c for c in status.get("conditions") or [] if isinstance(c, dict)}


def _true(cond: Mapping[str, Any] | None) -> bool:
    return cond is not None and cond.get("status") == "True"


@dataclass(frozen=True)
class WorkloadView:
    """One Workload's meaning for TauGrid."""

    admitted: bool
    cluster_queue: str | None
    flavors: tuple[str, ...]  # the flavor of each resource of each pod set, deduplicated
    evicted: bool
    evicted_reason: str | None
    evicted_message: str
    preempted_reason: str | None  # InClusterQueue, InCohortReclamation, ...
    pending_reason: str | None
    pending_message: str
    requeues: int
    finished: bool


def workload_view(workload: Mapping[str, Any]) -> WorkloadView:
    conds = _conditions(workload)
    status = workload.get("status") or {}
    admission = status.get("admission") or {}
    flavors: list[str] = []
    for ps in admission.get("podSetAssignments") or []:
        for flavor in (ps.get("flavors") or {}).values():
            if flavor not in flavors:
                flavors.append(flavor)
    reserved, admitted = conds.get("QuotaReserved"), conds.get("Admitted")
    evicted, preempted = conds.get("Evicted"), conds.get("Preempted")
    pending = None if _true(reserved) else reserved
    return WorkloadView(
        admitted=_true(reserved) and _true(admitted),
        cluster_queue=admission.get("clusterQueue"),
        flavors=tuple(flavors),
        evicted=_true(evicted),
        evicted_reason=evicted.get("reason") if _true(evicted) and evicted else None,
        evicted_message=(evicted or {}).get("message", "") if _true(evicted) else "",
        preempted_reason=(preempted or {}).get("reason") if _true(preempted) else None,
        pending_reason=(pending or {}).get("reason") if pending else None,
        pending_message=(pending or {}).get("message", "") if pending else "",
        requeues=int((status.get("requeueState") or {}).get("count") or 0),
        finished=_true(conds.get("Finished")),
    )


def admission_events(
    run_id: str, before: WorkloadView | None, after: WorkloadView
) -> list[AdmissionEvent]:
    """The admission events between two views of a run's Workload: edges, not levels,
    so a resync that finds nothing new reports nothing."""
    events: list[AdmissionEvent] = []
    was_evicted = before is not None and before.evicted
    if after.evicted and not was_evicted:
        if after.evicted_reason == "Preempted" or after.preempted_reason is not None:
            how = after.preempted_reason or "Preempted"
            events.append(
                AdmissionEvent(
                    AdmissionKind.PREEMPTED,
                    run_id,
                    f"preempted by Kueue ({how}): {after.evicted_message}".rstrip(": "),
                )
            )
        else:
            events.append(
                AdmissionEvent(
                    AdmissionKind.EVICTED,
                    run_id,
                    f"evicted by Kueue ({after.evicted_reason}): {after.evicted_message}".rstrip(
                        ": "
                    ),
                )
            )
    was_admitted = before is not None and before.admitted and not before.evicted
    if after.admitted and not after.evicted and not was_admitted:
        placement = Placement(
            flavor=",".join(after.flavors), host=after.cluster_queue or "cluster", nodes=()
        )
        events.append(
            AdmissionEvent(
                AdmissionKind.ADMITTED,
                run_id,
                f"admitted by Kueue to cluster queue {after.cluster_queue} "
                f"(flavor {', '.join(after.flavors) or 'none'})",
                placement,
            )
        )
    return events


def pending_words(view: WorkloadView) -> str | None:
    """Why the Workload waits, as ``tau status`` shows it; None when it does not."""
    if view.admitted and not view.evicted:
        return None
    if view.pending_reason is None:
        return "waiting for Kueue to look at it"
    text = view.pending_reason + (f": {view.pending_message}" if view.pending_message else "")
    if view.requeues:
        text += f" (requeued {view.requeues} times)"
    return text


@dataclass(frozen=True)
class PodView:
    """One pod's meaning: its phase, why it waits, and how it ended."""

    phase: str  # Pending | Running | Succeeded | Failed | Unknown
    waiting: str | None  # the reason a container or the scheduler gives
    waiting_message: str
    exit: AttemptExit | None


def pod_view(pod: Mapping[str, Any], container: str = "workload") -> PodView:
    status = pod.get("status") or {}
    phase = status.get("phase") or "Pending"
    scheduled = _conditions(pod).get("PodScheduled")
    waiting: str | None = None
    message = ""
    if scheduled is not None and scheduled.get("status") == "False":
        waiting, message = scheduled.get("reason") or "Unschedulable", scheduled.get("message", "")
    statuses = [
        *(status.get("initContainerStatuses") or []),
        *(status.get("containerStatuses") or []),
    ]
    for cs in statuses:
        wait = (cs.get("state") or {}).get("waiting")
        if wait and wait.get("reason") not in (None, "PodInitializing", "ContainerCreating"):
            waiting, message = wait["reason"], wait.get("message", "")
            break
    exit_ = None
    main = next(
        (cs for cs in status.get("containerStatuses") or [] if cs.get("name") == container), None
    )
    term = ((main or {}).get("state") or {}).get("terminated")
    if term is not None:
        code = int(term.get("exitCode") or 0)
        oom = term.get("reason") == "OOMKilled"
        exit_ = AttemptExit(
            outcome="succeeded" if code == 0 else "failed",
            exit_code=code,
            signal=term.get("signal"),
            oom=True if oom else None,
        )
    elif phase == "Failed":  # evicted, or an init container failed: no exit of the workload
        why = status.get("reason") or "Failed"
        failed_init = _failed_init(status.get("initContainerStatuses") or [])
        exit_ = AttemptExit(
            outcome="failed",
            exit_code=None,
            error=failed_init or f"pod failed ({why}): {status.get('message', '')}".rstrip(": "),
        )
    return PodView(phase=phase, waiting=waiting, waiting_message=message, exit=exit_)


def _failed_init(statuses: Iterable[Mapping[str, Any]]) -> str | None:
    for cs in statuses:
        term = (cs.get("state") or {}).get("terminated")
        if term and int(term.get("exitCode") or 0) != 0:
            return f"init container {cs.get('name')} exited with code {term.get('exitCode')}" + (
                f": {term['message'].strip()}" if term.get("message") else ""
            )
    return None


def start_blocked(view: PodView, waited_s: float) -> AttemptExit | None:
    """A pod whose container cannot start, once it has waited past the reason's grace:
    the attempt fails with the kubelet's words (the run's restart policy decides on)."""
    if view.waiting is None or view.waiting not in START_BLOCKERS:
        return None
    if waited_s < START_BLOCKERS[view.waiting]:
        return None
    return AttemptExit(
        outcome="failed",
        exit_code=None,
        error=f"the container cannot start ({view.waiting}): {view.waiting_message}".rstrip(": "),
    )
