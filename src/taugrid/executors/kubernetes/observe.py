"""Where one cluster attempt stands, from the objects the informers hold: a pure function
over plain dicts (the Job or RayJob, its pods, its Kueue Workload) to the engine's
``Observation``.

The phases a researcher waits through are kept apart, in words (``detail``): queued in
Kueue (suspended), admitted but no pod yet, a pod unschedulable, pulling its image,
fetching the code, running. A pod that cannot start (an image that does not exist, a
Secret key that is missing) fails the attempt once it has waited past the reason's grace
(``status.start_blocked``); the kubelet would retry forever.

How an attempt ended comes from the workload object's own status (the Job controller's
``Complete``/``Failed`` conditions, KubeRay's ``jobDeploymentStatus``), with the exit
code and OOM verdict of the first failed pod in rank order. An attempt TauGrid stopped
has ended once its objects and pods are gone: ``cancelled`` with the stop's reason (a
preemption is requeued by the engine, never counted as a failure).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from taugrid.domain.lifecycle import Observation, Phase
from taugrid.domain.outcomes import AttemptExit
from taugrid.domain.stops import StopReason
from taugrid.executors.kubernetes.status import (
    PodView,
    pending_words,
    pod_view,
    start_blocked,
    workload_view,
)
from taugrid.manifests.workloads import FETCH_CONTAINER, INDEX_ANNOTATION

JsonObject = Mapping[str, Any]


@dataclass(frozen=True)
class AttemptObjects:
    """What the cluster holds of one attempt right now."""

    kind: str  # Job | RayJob (what was created)
    workload: JsonObject | None  # the Job or RayJob; None once deleted
    pods: Sequence[JsonObject] = ()
    kueue: JsonObject | None = None  # Kueue's Workload for it, when Kueue made one
    # When each pod was first seen waiting for its current reason (pod name -> time).
    waiting_since: Mapping[str, float] | None = None


def parse_time(value: object) -> float | None:
    """An RFC 3339 timestamp of the API server as a Unix time; None when absent/bad."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def rank_of(pod: JsonObject) -> int:
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    labels = (pod.get("metadata") or {}).get("labels") or {}
    raw = annotations.get(INDEX_ANNOTATION) or labels.get(INDEX_ANNOTATION) or "0"
    return int(raw) if str(raw).isdigit() else 0


def pod_name(pod: JsonObject) -> str:
    return str((pod.get("metadata") or {}).get("name", "?"))


def _conditions(obj: JsonObject) -> dict[str, JsonObject]:
    return {
        c.get("type", ""): c
        for c in (obj.get("status") or {}).get("conditions") or []
        if isinstance(c, dict)
    }


def observe(
    objects: AttemptObjects, stop: StopReason | None, now: float, launched_at: float
) -> Observation:
    """The attempt's observation (``stop``: TauGrid deleted its objects for this reason)."""
    ended = _ended(objects)
    if ended is not None:
        return ended
    pods = sorted(objects.pods, key=rank_of)
    if stop is not None:
        if objects.workload is None and not pods:
            return Observation(
                Phase.EXITED,
                finished_at=now,
                exit=AttemptExit("cancelled", None, stop_reason=stop),
            )
        left = len(pods)
        return Observation(
            Phase.RUNNING if _running(pods) else Phase.STARTING,
            started_at=_started(pods),
            detail=f"stopping ({stop.value}): waiting for {left} pod(s) to go",
        )
    if objects.workload is None:
        return Observation(
            Phase.EXITED,
            finished_at=now,
            exit=AttemptExit(
                "lost",
                None,
                error=f"its {objects.kind} was deleted outside TauGrid",
            ),
        )
    views = [(pod, pod_view(pod)) for pod in pods]
    since = objects.waiting_since or {}
    for pod, view in views:
        blocked = start_blocked(view, now - since.get(pod_name(pod), now))
        if blocked is not None:
            return Observation(Phase.EXITED, finished_at=now, exit=_named(blocked, pod, pods))
    if objects.kind == "RayJob":
        status = objects.workload.get("status") or {}
        if status.get("jobDeploymentStatus") == "Running":
            started = parse_time(status.get("startTime")) or _started(pods) or now
            return Observation(Phase.RUNNING, started_at=started, detail=_ray_words(status))
    elif _running(pods):
        return Observation(
            Phase.RUNNING, started_at=_started(pods) or now, detail=_running_words(views)
        )
    return Observation(Phase.STARTING, detail=waiting_words(objects, views, now, launched_at))


def _ended(objects: AttemptObjects) -> Observation | None:
    obj = objects.workload
    if obj is None:
        return None
    status = obj.get("status") or {}
    started = parse_time(status.get("startTime"))
    if objects.kind == "RayJob":
        deployment = status.get("jobDeploymentStatus")
        if deployment not in ("Complete", "Failed"):
            return None
        finished = parse_time(status.get("endTime"))
        if status.get("jobStatus") == "SUCCEEDED":
            ex = AttemptExit("succeeded", 0)
        else:
            reason = status.get("reason") or deployment
            outcome = "timeout" if reason == "DeadlineExceeded" else "failed"
            message = " ".join(str(status.get("message") or "").split())
            ex = AttemptExit(
                outcome, None, error=f"Ray job {status.get('jobStatus') or reason}: {message}"
            )
        return Observation(Phase.EXITED, started_at=started, finished_at=finished, exit=ex)
    conds = _conditions(obj)
    finished = parse_time(status.get("completionTime"))
    if (conds.get("Complete") or {}).get("status") == "True":
        return Observation(
            Phase.EXITED, started_at=started, finished_at=finished, exit=AttemptExit("succeeded", 0)
        )
    failed = conds.get("Failed") or {}
    if failed.get("status") != "True":
        return None
    finished = finished or parse_time(failed.get("lastTransitionTime"))
    reason = failed.get("reason") or "Failed"
    pods = sorted(objects.pods, key=rank_of)
    failed_pods = [(p, e) for p in pods if (e := pod_view(p).exit) and e.outcome == "failed"]
    if reason == "DeadlineExceeded":
        ex = AttemptExit("timeout", None, detail="the Job reached its activeDeadlineSeconds")
    elif failed_pods:  # the first in rank order: the others often fail because it did
        ex = _named(failed_pods[0][1], failed_pods[0][0], pods)
    else:
        message = " ".join(str(failed.get("message") or "").split())
        ex = AttemptExit("failed", None, error=f"the Job failed ({reason}): {message}".rstrip(": "))
    return Observation(Phase.EXITED, started_at=started, finished_at=finished, exit=ex)


def _named(ex: AttemptExit, pod: JsonObject, pods: Sequence[JsonObject]) -> AttemptExit:
    """The exit with the pod (and rank, of several) it came from."""
    where = f"pod {pod_name(pod)}" + (f" (rank {rank_of(pod)})" if len(pods) > 1 else "")
    detail = f"{where}; {ex.detail}" if ex.detail else where
    return AttemptExit(
        ex.outcome, ex.exit_code, ex.signal, error=ex.error, oom=ex.oom, detail=detail
    )


def _running(pods: Sequence[JsonObject]) -> bool:
    return any((p.get("status") or {}).get("phase") == "Running" for p in pods)


def _started(pods: Sequence[JsonObject]) -> float | None:
    times = [
        t
        for p in pods
        if (p.get("status") or {}).get("phase") in ("Running", "Succeeded", "Failed")
        and (t := parse_time((p.get("status") or {}).get("startTime"))) is not None
    ]
    return min(times) if times else None


def _running_words(views: Sequence[tuple[JsonObject, PodView]]) -> str:
    running = sum(1 for _, v in views if v.phase == "Running")
    return f"running: {running} of {len(views)} pod(s)"


def _ray_words(status: JsonObject) -> str:
    return f"Ray job {status.get('jobStatus') or 'PENDING'} on {status.get('rayClusterName', '?')}"


HINTS = {
    "ImagePullBackOff": "; hint: check image: in tau.yaml and the cluster's pull credentials",
    "ErrImagePull": "; hint: check image: in tau.yaml and the cluster's pull credentials",
    "InvalidImageName": "; hint: image: in tau.yaml is not a valid image reference",
    "CreateContainerConfigError": "; hint: a secret it needs is missing (tau secret set)",
}


def _pods_ready_note(kueue: JsonObject | None) -> str:
    """Kueue evicts an admitted Workload whose pods are not all ready in time."""
    if kueue is None:
        return ""
    ready = _conditions(kueue).get("PodsReady")
    if ready is None or ready.get("status") != "False":
        return ""
    return " (Kueue requeues it if its pods are not ready within its PodsReady timeout)"


def waiting_words(
    objects: AttemptObjects,
    views: Sequence[tuple[JsonObject, PodView]],
    now: float,
    launched_at: float,
) -> str:
    """What the attempt waits on now, the phase first: Kueue, the Job controller, the
    scheduler, the image, the code, the container."""
    obj = objects.workload or {}
    if (obj.get("spec") or {}).get("suspend"):
        if objects.kueue is None:
            return "submitted: waiting for Kueue to make its Workload"
        words = pending_words(workload_view(objects.kueue)) or "admitted by Kueue; starting"
        return f"queued in Kueue: {words}"
    if objects.kind == "RayJob":
        status = obj.get("status") or {}
        return f"admitted; Ray cluster {status.get('jobDeploymentStatus') or 'being created'}"
    if not views:
        waited = max(0, int(now - launched_at))
        return f"admitted; waiting for the Job controller to create pods ({waited} s)"
    ready_note = _pods_ready_note(objects.kueue)
    for pod, view in views:
        if view.waiting == "Unschedulable":
            return (
                f"scheduling: pod {pod_name(pod)} is unschedulable: {view.waiting_message}"
                f"{ready_note}; hint: no node has what it asks for (resources:, gpu_type:)"
            )
        if view.waiting is not None:
            what = f"{view.waiting}: {view.waiting_message}".rstrip(": ")
            hint = HINTS.get(view.waiting, "")
            return f"starting: pod {pod_name(pod)} waits ({what}){ready_note}{hint}"
    for pod, _ in views:
        status = pod.get("status") or {}
        for cs in status.get("initContainerStatuses") or []:
            if cs.get("name") == FETCH_CONTAINER and "running" in (cs.get("state") or {}):
                return f"starting: pod {pod_name(pod)} is fetching the code"
    scheduled = sum(
        1
        for pod, _ in views
        if (_conditions(pod).get("PodScheduled") or {}).get("status") == "True"
        or (pod.get("spec") or {}).get("nodeName")
    )
    if scheduled < len(views):
        return f"scheduling: {scheduled} of {len(views)} pod(s) on a node"
    return f"starting: {len(views)} pod(s) scheduled, containers starting"
