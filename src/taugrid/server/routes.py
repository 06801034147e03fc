"""HTTP routes of /api/v1: thin translations between HTTP and :class:`RunService`; what
they answer is built by ``views.py``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

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
from taugrid.server.changes import ANY
from taugrid.server.run_files import checkpoint_out
from taugrid.server.safe_files import file_response
from taugrid.server.schemas import (
    ArtifactList,
    ArtifactOut,
    AttemptStatusReport,
    BatchSubmitRequest,
    BatchSubmitResponse,
    CancelRequest,
    CancelResponse,
    CancelResult,
    CheckpointDetail,
    CheckpointList,
    ErrorOut,
    EventFeed,
    EventOut,
    FeedEventOut,
    GpuUseSample,
    MetricPoint,
    MetricSeries,
    PolicyApply,
    PolicyApplyOut,
    PolicyDriftOut,
    PolicyOut,
    QueueList,
    RunDetail,
    RunList,
    RunOut,
    SubmitRequest,
    SubmitResponse,
)
from taugrid.server.services import RunService
from taugrid.server.views import (
    policy_applied_out,
    policy_drift_out,
    policy_out,
    queue_view,
    run_detail,
    run_events,
    run_row,
)
from taugrid.store.runs import MAX_SEARCH_CHARS, Row, RunFilter

router = APIRouter(prefix="/api/v1")


def _svc(request: Request) -> RunService:
    """The run service as the calling user sees it (set by the token check)."""
    svc: RunService = request.app.state.service
    return svc.for_caller(request.state.caller)


def _caller(request: Request) -> Caller:
    caller: Caller = request.state.caller
    return caller


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
    svc = _svc(request)
    with (
        svc.tracing.submit("/api/v1/runs", workspace),  # server/tracing.py; off: a no-op
        audited(request, "run.submit", workspace=workspace) as entry,
    ):
        run, created = svc.submit(req, idempotency_key)
        entry["target"] = run["id"]
    response.status_code = 201 if created else 200
    return SubmitResponse(
        run=run_row(svc, run), created=created, warnings=submit_warnings(run, req)
    )


@limited_route(
    router, "POST", "/runs/batch", MAX_BATCH_BODY_BYTES, response_model=BatchSubmitResponse
)
def submit_batch(body: BatchSubmitRequest, request: Request) -> BatchSubmitResponse:
    """Submit many runs in one request and one durable commit (sweeps, job arrays):
    all are recorded or, when any is invalid, none."""
    items = [(item, item.idempotency_key) for item in body.runs]
    svc = _svc(request)
    with audited(request, "run.submit") as entry:
        results = svc.submit_many(items)
        entry["target"] = ",".join(r["id"] for r, _ in results)
        entry["workspace"] = _audit_workspace(
            ",".join(sorted({r["workspace"] for r, _ in results}))
        )
    return BatchSubmitResponse(
        results=[
            SubmitResponse(run=run_row(svc, r), created=c, warnings=submit_warnings(r, item))
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
            else CancelResult(ref=ref, run=run_row(_svc(request), r), error=None)
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
    queue: str | None = None,
    user: Annotated[str | None, Query(description="the submitter")] = None,
    until: Annotated[float | None, Query(description="unix seconds, created before")] = None,
    q: Annotated[
        str | None,
        Query(
            max_length=MAX_SEARCH_CHARS,
            description="case-insensitive substring of id, name, experiment, submitter, message",
        ),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    cursor: str | None = None,
) -> RunList:
    flt = RunFilter(
        states=[s.upper() for s in state or []],
        name=name,
        since=since,
        workspace=workspace,
        experiment=experiment,
        queue=queue,
        submitter=user,
        until=until,
        text=q,
        visible=visible_workspaces(_caller(request)),
    )
    rows, nxt = _svc(request).list_runs(flt, limit, cursor)
    return RunList(runs=[run_row(_svc(request), r) for r in rows], next_cursor=nxt)


@router.get("/runs/{ref}", response_model=RunDetail)
def get_run(ref: str, request: Request) -> RunDetail:
    svc = _svc(request)
    return run_detail(svc, svc.get(ref))


@router.post("/runs/{ref}/resume", response_model=RunOut)
def resume(ref: str, request: Request) -> RunOut:
    with audited(request, "run.resume", target=ref):
        return run_row(_svc(request), _svc(request).resume(ref))


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
    return file_response(_svc(request).open_checkpoint_file(ref, step, path))


@router.get("/runs/{ref}/metrics", response_model=MetricSeries)
def get_metrics(
    ref: str, request: Request, attempt: Annotated[int | None, Query(ge=0)] = None
) -> MetricSeries:
    svc = _svc(request)
    run_id, series = svc.metrics(ref, attempt)
    gpu = [GpuUseSample(**s) for s in svc.gpu_series(run_id)]
    return MetricSeries(run_id=run_id, series=[MetricPoint(**p) for p in series], gpu=gpu)


@router.get("/runs/{ref}/events", response_model=list[EventOut])
def get_events(ref: str, request: Request) -> list[EventOut]:
    svc = _svc(request)
    return run_events(svc, svc.get(ref))


@router.get("/runs/{ref}/logs", response_class=StreamingResponse)
async def get_logs(
    ref: str,
    request: Request,
    attempt: Annotated[int | None, Query(ge=0)] = None,
    tail: Annotated[int | None, Query(ge=0)] = None,
    follow: bool = False,
    rank: Annotated[int | None, Query(ge=0, description="one rank's pod only")] = None,
) -> StreamingResponse:
    follower = _svc(request).log_follower()
    req = await run_in_threadpool(follower.request, ref, attempt, tail, follow, rank)
    return StreamingResponse(follower.stream(req), media_type="text/plain; charset=utf-8")


@router.get("/events", response_model=EventFeed)
async def event_feed(
    request: Request,
    after: Annotated[int, Query(ge=0, description="the id of the last event seen")] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
    wait: Annotated[float, Query(ge=0, le=60, description="long-poll seconds")] = 0,
) -> EventFeed:
    """Every event after id ``after`` of the runs the caller may see, oldest first; with
    ``wait``, an empty answer waits up to that long for the next one (the feed behind
    the portal's live view)."""
    svc = _svc(request)
    found = await run_in_threadpool(svc.event_feed, after, limit)
    if not found and wait > 0 and await svc.engine.changes.wait(ANY, wait):
        found = await run_in_threadpool(svc.event_feed, after, limit)
    last = found[-1]["id"] if found else after
    return EventFeed(events=[FeedEventOut(**e) for e in found], last_id=last)


@router.post("/runs/{ref}/cancel", response_model=RunOut)
def cancel(ref: str, request: Request) -> RunOut:
    with audited(request, "run.cancel", target=ref):
        return run_row(_svc(request), _svc(request).cancel(ref))


@router.get("/runs/{ref}/artifacts", response_model=ArtifactList)
def list_artifacts(ref: str, request: Request) -> ArtifactList:
    run_id, files = _svc(request).artifacts(ref)
    return ArtifactList(run_id=run_id, artifacts=[ArtifactOut(**f) for f in files])


@router.get("/runs/{ref}/artifacts/{path:path}", response_class=StreamingResponse)
def get_artifact(ref: str, path: str, request: Request) -> StreamingResponse:
    return file_response(_svc(request).open_artifact(ref, path))


@router.post("/internal/attempt-status", status_code=204)
def attempt_status(report: AttemptStatusReport, request: Request) -> Response:
    """Supervisors push here the moment a process starts or ends; the files stay the
    truth, this only saves the engine a polling interval. Supervisors hold the local
    token; nobody else has any business here."""
    if _caller(request).auth != "local":
        raise NotFound("not found")
    _svc(request).engine.attempt_reported(report.attempt_dir)
    return Response(status_code=204)


@router.get("/queues", response_model=QueueList)
def list_queues(request: Request) -> QueueList:
    return queue_view(_svc(request))


@router.get("/admin/policy", response_model=PolicyOut)
def get_policy(request: Request) -> PolicyOut:
    require_admin(request)
    return policy_out(_svc(request).queueing.policy)


@router.put("/admin/policy", response_model=PolicyApplyOut)
def put_policy(body: PolicyApply, request: Request) -> PolicyApplyOut:
    """Validate, put on the cluster when the server has one (Queueing.apply: nothing is
    stored unless every object was applied), store, put in force."""
    svc = _svc(request)
    with audited(request, "policy.apply", target=body.source) as entry:
        require_admin(request)
        done = svc.queueing.apply(body.text, body.source)
        if done.cluster is not None:
            entry["detail"] = "applied to the cluster: " + done.cluster.applied_words()
    svc.engine.wake()  # queued runs may fit the new quotas
    return policy_applied_out(done)


@router.get("/admin/policy/drift", response_model=PolicyDriftOut)
def get_policy_drift(request: Request) -> PolicyDriftOut:
    """How the cluster differs from the policy in force (``cluster: false`` in local mode)."""
    require_admin(request)
    queueing = _svc(request).queueing
    current = queueing.policy
    return policy_drift_out(current, queueing.drift())


def require_admin(request: Request) -> None:
    """Platform administration: a non-admin is told the endpoint does not exist."""
    if not _caller(request).platform_admin:
        raise NotFound("not found")
