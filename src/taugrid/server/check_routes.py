"""/api/v1 routes for what ``tau run`` asks before it archives (``POST /runs/check``) and
what ``tau diff`` compares (``GET /runs/{ref}/snapshot``). Thin, as in routes.py."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from taugrid.domain.submit_limits import MAX_SUBMIT_BODY_BYTES
from taugrid.server.bodylimit import limited_route
from taugrid.server.info_routes import capabilities_out
from taugrid.server.schemas import CapabilitiesOut, SubmitRequest
from taugrid.server.services import RunService

router = APIRouter(prefix="/api/v1")

# ``RunService.check`` never looks at the snapshot; the submit body's field is required,
# so the check hands it this stand-in (no upload can have it: it is no archive's hash).
_NO_SNAPSHOT = "0" * 64


def _svc(request: Request) -> RunService:
    """The run service as the caller sees it (runs of other workspaces do not exist)."""
    svc: RunService = request.app.state.service
    return svc.for_caller(request.state.caller)


class CheckRequest(BaseModel):
    """A submit body before the snapshot exists: the same fields, without
    ``snapshot_digest`` (any other submit field is accepted and ignored)."""

    spec_source: str
    file_text: str | None = None
    overrides: list[str] = Field(default_factory=list)
    resolved: dict[str, Any]
    spec_hash: str | None = None
    submitter: str = "unknown"
    env: dict[str, str] = Field(default_factory=dict)
    rerun_of: str | None = None


class CheckResult(BaseModel):
    """Where the run would go; every check passed."""

    workspace: str
    queue: str = Field(description="The queue used: the spec's, else the workspace's default.")
    cluster_queue: str
    priority: str
    capabilities: CapabilitiesOut = Field(
        description="What the server's mode accepts, as GET /server answers (the CLI's notes)."
    )


class SnapshotMember(BaseModel):
    path: str
    type: str = Field(description="file or symlink")
    size: int
    sha256: str = Field(description="of the content; of the target text for a symlink")


class SnapshotListing(BaseModel):
    run_id: str
    digest: str
    files: list[SnapshotMember]


@limited_route(router, "POST", "/runs/check", MAX_SUBMIT_BODY_BYTES, response_model=CheckResult)
def check_submission(body: CheckRequest, request: Request) -> CheckResult:
    """Every submit check that needs no snapshot (limits, spec, workspace and role, queue,
    priority, fit, secrets, ``rerun_of``, disk headroom), with the submit's errors;
    nothing is recorded. ``POST /runs`` checks everything again."""
    req = SubmitRequest(**body.model_dump(), snapshot_digest=_NO_SNAPSHOT)
    svc = _svc(request)
    return CheckResult(**svc.check(req), capabilities=capabilities_out(svc.capabilities))


class DryRunRequest(CheckRequest):
    snapshot_digest: str = _NO_SNAPSHOT


class DryRunResult(BaseModel):
    objects: list[dict[str, Any]] = Field(
        description="What the run's first attempt would create, in creation order."
    )


@limited_route(router, "POST", "/runs/dry-run", MAX_SUBMIT_BODY_BYTES, response_model=DryRunResult)
def dry_run(body: DryRunRequest, request: Request) -> DryRunResult:
    """Every submit check, then the objects the executor would create for the first
    attempt (``tau run --dry-run``); nothing is created or recorded. A cluster server
    only: a local one answers 400 (``tau render`` shows a cluster's objects offline)."""
    req = SubmitRequest(**body.model_dump())
    return DryRunResult(objects=_svc(request).preview(req))


@router.get("/runs/{ref}/snapshot", response_model=SnapshotListing)
def snapshot_listing(ref: str, request: Request) -> SnapshotListing:
    """The files of the run's code snapshot (size, sha256), for whoever may read the run."""
    run_id, digest, files = _svc(request).snapshot_listing(ref)
    return SnapshotListing(run_id=run_id, digest=digest, files=[SnapshotMember(**f) for f in files])
