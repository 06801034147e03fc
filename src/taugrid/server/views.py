"""Views: what the API and the portal show of runs and queues, built once here
from the service layer, so every surface shows the same fields with the same meaning.
Routes translate HTTP to these; they build no model of their own."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from taugrid.ports.policy_target import Drift
from taugrid.server.launching import restart_policy_of
from taugrid.server.queueing import PolicyApplied, PolicyInForce
from taugrid.server.run_files import checkpoint_out
from taugrid.server.schemas import (
    AttemptOut,
    CheckpointOut,
    DriftOut,
    EventOut,
    ExperimentOut,
    GpuUse,
    MetricsLast,
    PendingOut,
    PolicyApplyOut,
    PolicyClusterOut,
    PolicyDriftOut,
    PolicyOut,
    QueueHeadOut,
    QueueList,
    QueueOut,
    RestartPolicyOut,
    RunDetail,
    RunOut,
    SpecRecord,
)
from taugrid.server.services import RunService, queue_report
from taugrid.store.runs import Row

ACTIVE = frozenset({"ADMITTED", "RUNNING"})


def run_row(svc: RunService, r: Row) -> RunOut:
    """A run as lists show it (what `tau status` and the portal's tables read)."""
    pend = svc.engine.pending.get(r["id"]) if r["state"] == "QUEUED" else None
    return RunOut(
        id=r["id"],
        name=r["name"],
        workspace=r["workspace"],
        queue=r["queue"],
        priority=r["priority"],
        state=r["state"],
        reason=r["reason"],
        message=r["message"],
        created_at=r["created_at"],
        updated_at=r["updated_at"],
        started_at=r["started_at"],
        finished_at=r["finished_at"],
        exit_code=r["exit_code"],
        attempts=r["attempt_count"],
        gpus=r["gpus"],
        submitter=r["submitter"],
        spec_hash=r["spec_hash"],
        cancel_requested=r["cancel_requested_at"] is not None,
        pending=PendingOut(
            cluster_queue=pend.cluster_queue,
            position=pend.position,
            reason=pend.reason,
            message=pend.message,
        )
        if pend
        else None,
        experiment=ExperimentOut(**r["experiment"]) if r.get("experiment") else None,
        metrics_last=MetricsLast(**r["metrics_last"]) if r.get("metrics_last") else None,
        gpu_use=_gpu_use(svc, r),
        restarts=r.get("restarts") or 0,
        progress=progress_words(
            svc.engine.progress.get(r["id"]) if r["state"] in ACTIVE else None,
            r["state"],
            r.get("metrics_last"),
        ),
    )


def _gpu_use(svc: RunService, r: Row) -> GpuUse | None:
    if r["state"] != "RUNNING":
        return None
    now = svc.gpu_now(r["id"])
    return GpuUse(**now) if now is not None else None


def progress_words(
    detail: str | None, state: str, metrics_last: dict[str, Any] | None, now: float | None = None
) -> str | None:
    """Where an attempt stands (the executor's words), and for a running one whether it
    progresses: running is not progressing, and only the workload's latest logged step
    says that it does."""
    if detail is None or state != "RUNNING":
        return detail
    if not metrics_last or metrics_last.get("time") is None:
        return f"{detail}; no metric logged yet"
    age = max(0.0, (time.time() if now is None else now) - float(metrics_last["time"]))
    step = metrics_last.get("step")
    what = f"step {step}" if step is not None else "a metric"
    return f"{detail}; progressing: {what} logged {_ago(age)}"


def _ago(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s ago"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.1f} h ago"


def run_detail(svc: RunService, r: Row) -> RunDetail:
    """One run whole: record, events, attempts, restart policy, checkpoints (a full
    row: ``svc.get``)."""
    policy = restart_policy_of(r["spec_resolved"])
    code = dict(r["code_info"] or {})
    return RunDetail(
        **run_row(svc, r).model_dump(),
        spec=SpecRecord(
            source=r["spec_source"],
            file_text=r["spec_file_text"],
            overrides=r["spec_overrides"],
            resolved=r["spec_resolved"],
            hash=r["spec_hash"],
            snapshot_digest=r["snapshot_digest"],
        ),
        env=r["env_summary"],
        events=[EventOut(**_pick(e, EventOut)) for e in svc.store.events(r["id"])],
        attempt_list=[AttemptOut(**_pick(a, AttemptOut)) for a in svc.store.attempts(r["id"])],
        code={"snapshot_digest": r["snapshot_digest"], "git": code.get("git")},
        python_env=r["python_env"],
        rerun_of=r["rerun_of"],
        restart_policy=RestartPolicyOut(
            max=policy.max,
            on=sorted(policy.on),
            backoff_s=policy.backoff_s,
            used=r["restarts"],
            next_at=r["next_attempt_at"] if r["state"] == "RESTARTING" else None,
        ),
        checkpoints=[CheckpointOut(**checkpoint_out(c)) for c in svc.files.checkpoints(r["id"])],
    )


def _pick(row: Row, model: type[Any]) -> dict[str, Any]:
    return {k: row[k] for k in model.model_fields}


def queue_view(svc: RunService) -> QueueList:
    """The caller's queues (see ``queue_report``); the policy's source (a file name on the
    admin's machine) is for platform admins, others learn only whether it is built in."""
    usage, lqs, heads = queue_report(svc)
    pol = svc.queueing.policy
    source = pol.source if svc.caller.platform_admin or pol.builtin else "platform policy"
    return QueueList(
        policy=source,
        queues=[
            QueueOut(
                name=name,
                cohort=u.cohort,
                strategy=svc.queueing.policy.domain.queues[name].strategy,
                local_queues=lqs.get(name, []),
                quota=_plain(u.quota),
                used=_plain(u.used),
                borrowed=_plain(u.borrowed),
                pending=u.pending,
                running=u.running,
                heads=[
                    QueueHeadOut(
                        run_id=h.run_id,
                        workspace=h.workspace,
                        position=h.position,
                        reason=h.reason,
                        message=h.message,
                    )
                    for h in heads.get(name, [])
                ],
            )
            for name, u in sorted(usage.items())
        ],
    )


def _plain(m: Mapping[str, Mapping[Any, int]]) -> dict[str, dict[str, int]]:
    return {k: dict(v) for k, v in m.items()}


def policy_out(p: PolicyInForce) -> PolicyOut:
    d = p.domain
    return PolicyOut(
        source=p.source,
        builtin=p.builtin,
        text=p.text if p.text is not None else p.builtin_text,  # the built-in, as policy.yaml
        hash=p.hash,
        applied_at=p.applied_at,
        applied_by=p.applied_by,
        flavors=sorted(d.flavors),
        cluster_queues=sorted(d.queues),
        cohorts=sorted({q.cohort for q in d.queues.values() if q.cohort}),
        priorities=dict(sorted(d.priorities.items(), key=lambda kv: kv[1])),
        default_priority=d.default_priority,
        local_queues=sorted(f"{w}/{q}" for w, q in d.local_queues),
    )


def drift_out(found: Iterable[Drift]) -> list[DriftOut]:
    return [
        DriftOut(object=str(d.object), kind=d.object.kind, state=d.state, what=d.what)
        for d in found
    ]


def policy_applied_out(done: PolicyApplied) -> PolicyApplyOut:
    cluster = None
    if done.cluster is not None:
        cluster = PolicyClusterOut(
            applied=[str(o) for o in done.cluster.applied],
            counts=done.cluster.counts(),
            drift_before=drift_out(done.drift_before),
        )
    return PolicyApplyOut(**policy_out(done.policy).model_dump(), cluster=cluster)


def policy_drift_out(p: PolicyInForce, found: list[Drift] | None) -> PolicyDriftOut:
    return PolicyDriftOut(
        cluster=found is not None, source=p.source, hash=p.hash, drift=drift_out(found or [])
    )


def run_events(svc: RunService, r: Row) -> list[EventOut]:
    return [EventOut(**_pick(e, EventOut)) for e in svc.store.events(r["id"])]
