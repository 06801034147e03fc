"""HTTP routes of /api/v1: thin translations between HTTP and :class:`RunService`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated, Any

import anyio.from_thread
from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from taugrid.domain.access import Caller, visible_workspaces
from taugrid.domain.credentials import inline_credential_warnings
from taugrid.domain.submit_limits import (
    MAX_BATCH_BODY_BYTES,
    MAX_NAME_CHARS,
    MAX_SUBMIT_BODY_BYTES,
    is_workspace_name,
)
from taugrid.errors import NotFound, TauError
from taugrid.server.audit import audited
from taugrid.server.bodylimit import limited_route
from taugrid.server.launching import restart_policy_of
from taugrid.server.queueing import PolicyInForce
from taugrid.server.run_files import checkpoint_out
from taugrid.server.safe_files import fd_response
from taugrid.server.schemas import (
    ArtifactList,
    ArtifactOut,
    AttemptOut,
    AttemptStatusReport,
    BatchSubmitRequest,
    BatchSubmitResponse,
    CancelRequest,
    CancelResponse,
    CancelResult,
    CheckpointDetail,
    CheckpointList,
    CheckpointOut,
    ErrorOut,
    EventOut,
    ExperimentOut,
    MetricPoint,
    MetricSeries,
    MetricsLast,
    PendingOut,
    PolicyApply,
    PolicyOut,
    QueueHeadOut,
    QueueList,
    QueueOut,
    RestartPolicyOut,
    RunDetail,
    RunList,
    RunOut,
    SpecRecord,
    SubmitRequest,
    SubmitResponse,
)
from taugrid.server.services import RunService, queue_report
from taugrid.store.runs import Row, RunFilter

router = APIRouter(prefix="/api/v1")


def _svc(request: Request) -> RunService:
    """The run service as the calling user sees it (set by the token check)."""
    svc: RunService = request.app.state.service
    return svc.for_caller(request.state.caller)


def _caller(request: Request) -> Caller:
    caller: Caller = request.state.caller
    return caller


def run_out(r: Row, request: Request) -> RunOut:
    pend = _svc(request).engine.pending.get(r["id"]) if r["state"] == "QUEUED" else None
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
        restarts=r.get("restarts") or 0,
    )


@router.head("/snapshots/{digest}")
def head_snapshot(digest: str, request: Request, workspace: str = "default") -> Response:
    """200 when ``digest`` was uploaded for ``workspace`` and the caller may read it; 404
    otherwise, whatever other workspaces have."""
    found = _svc(request).has_snapshot(digest, workspace)
    return Response(status_code=200 if found else 404)


@router.put("/snapshots/{digest}", status_code=201)
async def put_snapshot(digest: str, request: Request, workspace: str = "default") -> dict[str, str]:
    """Upload a snapshot for ``workspace`` (submit rights needed). The body goes to disk as
    it arrives, hashed on the way, and stops being read the moment it passes the limit."""
    body = request.stream()

    def next_piece() -> bytes | None:  # called from the worker thread
        try:
            return anyio.from_thread.run(body.__anext__)
        except StopAsyncIteration:
            return None

    # File and database work runs in a worker thread; only the socket reads are here.
    await run_in_threadpool(_store_snapshot, request, digest, workspace, next_piece)
    return {"digest": digest}


def _store_snapshot(
    request: Request, digest: str, workspace: str, next_piece: Callable[[], bytes | None]
) -> None:
    svc = _svc(request)
    declared = request.headers.get("content-length")
    shown = _audit_workspace(workspace)
    with audited(request, "snapshot.upload", target=digest[:64], workspace=shown):
        upload = svc.start_snapshot_upload(
            digest, workspace, int(declared) if declared and declared.isdigit() else None
        )
        try:
            while (piece := next_piece()) is not None:
                upload.write(piece)
            svc.finish_snapshot_upload(upload, workspace)
        finally:
            upload.discard()


@limited_route(router, "POST", "/runs", MAX_SUBMIT_BODY_BYTES, response_model=SubmitResponse)
def submit(
    req: SubmitRequest,
    request: Request,
    response: Response,
    idempotency_key: Annotated[str | None, Header()] = None,
) -> SubmitResponse:
    workspace = _audit_workspace(req.resolved.get("workspace") or "default")
    with audited(request, "run.submit", workspace=workspace) as entry:
        run, created = _svc(request).submit(req, idempotency_key)
        entry["target"] = run["id"]
    response.status_code = 201 if created else 200
    return SubmitResponse(
        run=run_out(run, request), created=created, warnings=submit_warnings(run, req)
    )


@limited_route(
    router, "POST", "/runs/batch", MAX_BATCH_BODY_BYTES, response_model=BatchSubmitResponse
)
def submit_batch(body: BatchSubmitRequest, request: Request) -> BatchSubmitResponse:
    """Submit many runs in one request and one durable commit (sweeps, job arrays):
    all are recorded or, when any is invalid, none."""
    items = [(item, item.idempotency_key) for item in body.runs]
    with audited(request, "run.submit") as entry:
        results = _svc(request).submit_many(items)
        entry["target"] = ",".join(r["id"] for r, _ in results)
        entry["workspace"] = _audit_workspace(
            ",".join(sorted({r["workspace"] for r, _ in results}))
        )
    return BatchSubmitResponse(
        results=[
            SubmitResponse(run=run_out(r, request), created=c, warnings=submit_warnings(r, item))
            for (r, c), item in zip(results, body.runs, strict=True)
        ]
    )


def _audit_workspace(value: object) -> str | None:
    """The workspace for the audit entry: a request may name anything (a NUL, a megabyte)
    and the column holds a workspace name; anything else is left out."""
    if isinstance(value, str) and all(is_workspace_name(w) for w in value.split(",")):
        return value if len(value) <= MAX_NAME_CHARS["workspace"] else None
    return None


def submit_warnings(run: Row, req: SubmitRequest) -> list[str]:
    """What the submitter should know about an accepted run: env values that look like
    credentials (stored in clear in the record), without the values."""
    env = req.resolved.get("env")
    return inline_credential_warnings(env, run["workspace"]) if isinstance(env, dict) else []


@router.post("/runs/cancel", response_model=CancelResponse)
def cancel_many(body: CancelRequest, request: Request) -> CancelResponse:
    """Cancel many runs in one request and one durable commit; per-run results."""
    with audited(request, "run.cancel", target=",".join(body.runs)) as entry:
        results = _svc(request).cancel_many(body.runs)
        refused = [f"{ref}: {r.code}" for ref, r in results.items() if isinstance(r, TauError)]
        entry["detail"] = "; ".join(refused) or None
    return CancelResponse(
        results=[
            CancelResult(ref=ref, run=None, error=ErrorOut(code=r.code, message=r.message))
            if isinstance(r, TauError)
            else CancelResult(ref=ref, run=run_out(r, request), error=None)
            for ref, r in results.items()
        ]
    )


@router.get("/runs", response_model=RunList)
def list_runs(
    request: Request,
    state: Annotated[list[str] | None, Query()] = None,
    name: str | None = None,
    since: Annotated[float | None, Query(description="unix seconds")] = None,
    workspace: str | None = None,
    experiment: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    cursor: str | None = None,
) -> RunList:
    flt = RunFilter(
        states=[s.upper() for s in state or []],
        name=name,
        since=since,
        workspace=workspace,
        experiment=experiment,
        visible=visible_workspaces(_caller(request)),
    )
    rows, nxt = _svc(request).list_runs(flt, limit, cursor)
    return RunList(runs=[run_out(r, request) for r in rows], next_cursor=nxt)


@router.get("/runs/{ref}", response_model=RunDetail)
def get_run(ref: str, request: Request) -> RunDetail:
    svc = _svc(request)
    r = svc.get(ref)
    policy = restart_policy_of(r["spec_resolved"])
    code = dict(r["code_info"] or {})
    return RunDetail(
        **run_out(r, request).model_dump(),
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


@router.post("/runs/{ref}/resume", response_model=RunOut)
def resume(ref: str, request: Request) -> RunOut:
    with audited(request, "run.resume", target=ref):
        return run_out(_svc(request).resume(ref), request)


@router.get("/runs/{ref}/checkpoints", response_model=CheckpointList)
def list_checkpoints(
    ref: str,
    request: Request,
    verify: Annotated[bool, Query(description="hash every file (sha256)")] = False,
) -> CheckpointList:
    run_id, found = _svc(request).checkpoints(ref, full=verify)
    return CheckpointList(
        run_id=run_id,
        checkpoints=[CheckpointDetail(**checkpoint_out(c, files=True)) for c in found],
    )


@router.get("/runs/{ref}/checkpoints/{step}/files/{path:path}", response_class=StreamingResponse)
def get_checkpoint_file(ref: str, step: int, path: str, request: Request) -> StreamingResponse:
    return fd_response(_svc(request).open_checkpoint_file(ref, step, path))


@router.get("/runs/{ref}/metrics", response_model=MetricSeries)
def get_metrics(
    ref: str, request: Request, attempt: Annotated[int | None, Query(ge=0)] = None
) -> MetricSeries:
    run_id, series = _svc(request).metrics(ref, attempt)
    return MetricSeries(run_id=run_id, series=[MetricPoint(**p) for p in series])


@router.get("/runs/{ref}/events", response_model=list[EventOut])
def get_events(ref: str, request: Request) -> list[EventOut]:
    svc = _svc(request)
    return [EventOut(**_pick(e, EventOut)) for e in svc.store.events(svc.get(ref)["id"])]


@router.get("/runs/{ref}/logs", response_class=StreamingResponse)
def get_logs(
    ref: str,
    request: Request,
    attempt: Annotated[int | None, Query(ge=0)] = None,
    tail: Annotated[int | None, Query(ge=0)] = None,
    follow: bool = False,
) -> StreamingResponse:
    stream = _svc(request).log_stream(ref, attempt, tail, follow)
    return StreamingResponse(stream, media_type="text/plain; charset=utf-8")


@router.post("/runs/{ref}/cancel", response_model=RunOut)
def cancel(ref: str, request: Request) -> RunOut:
    with audited(request, "run.cancel", target=ref):
        return run_out(_svc(request).cancel(ref), request)


@router.get("/runs/{ref}/artifacts", response_model=ArtifactList)
def list_artifacts(ref: str, request: Request) -> ArtifactList:
    run_id, files = _svc(request).artifacts(ref)
    return ArtifactList(run_id=run_id, artifacts=[ArtifactOut(**f) for f in files])


@router.get("/runs/{ref}/artifacts/{path:path}", response_class=StreamingResponse)
def get_artifact(ref: str, path: str, request: Request) -> StreamingResponse:
    return fd_response(_svc(request).open_artifact(ref, path))


@router.post("/internal/attempt-status", status_code=204)
def attempt_status(report: AttemptStatusReport, request: Request) -> Response:
    """Supervisors push here the moment a process starts or ends; the files stay the
    truth, this only saves the engine a polling interval. Supervisors hold the local
    token; nobody else has any business here."""
    if _caller(request).auth != "local":
        raise NotFound("not found")
    _svc(request).engine.attempt_reported(report.attempt_dir)
    return Response(status_code=204)


def _pick(row: Row, model: type[Any]) -> dict[str, Any]:
    return {k: row[k] for k in model.model_fields}


@router.get("/queues", response_model=QueueList)
def list_queues(request: Request) -> QueueList:
    """The caller's queues (see ``queue_report``); the policy's source (a file name on the
    admin's machine) is for platform admins, others learn only whether it is built in."""
    svc = _svc(request)
    usage, lqs, heads = queue_report(svc)
    pol = svc.queueing.policy
    source = pol.source if _caller(request).platform_admin or pol.builtin else "platform policy"
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


@router.get("/admin/policy", response_model=PolicyOut)
def get_policy(request: Request) -> PolicyOut:
    require_admin(request)
    return policy_out(_svc(request).queueing.policy)


@router.put("/admin/policy", response_model=PolicyOut)
def put_policy(body: PolicyApply, request: Request) -> PolicyOut:
    svc = _svc(request)
    with audited(request, "policy.apply", target=body.source):
        require_admin(request)
        applied = svc.queueing.apply(body.text, body.source)
    svc.engine.wake()  # queued runs may fit the new quotas
    return policy_out(applied)


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


def require_admin(request: Request) -> None:
    """Platform administration: a non-admin is told the endpoint does not exist."""
    if not _caller(request).platform_admin:
        raise NotFound("not found")
