"""What a cluster attempt's reporting sidecar (``taugrid.podreport``) sends, to the
bearer of that attempt's report token (``domain.code_tokens.issue_report``) only:

- ``POST /api/v1/runs/{run}/attempts/{k}/metrics?offset=N``: the next bytes of the
  attempt's metrics file (whole lines, at most ``MAX_REPORT_BYTES``); answers
  ``{"size": S}``, the server's copy's size, or 409 with ``size`` when the sender is
  ahead of it (``ports.pod_reports``). An empty body asks for the size.
- ``PUT /api/v1/runs/{run}/attempts/{k}/checkpoints``: the ``step-*`` directories the
  pod sees on the run's volume, each with its manifest and the pod's verdict.

Not behind the API token: the pod holds no user's credentials, only its attempt's
token, which names one run's attempt and opens nothing else. A wrong, expired or
foreign token is a 401 whatever exists; the token is never logged. A server that is
not in cluster mode has no such routes' sink and answers 404.
"""

from __future__ import annotations

import time

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from taugrid.domain.code_tokens import verify_report
from taugrid.errors import AuthError, NotFound, UsageError
from taugrid.ports.executor import AttemptKey
from taugrid.ports.pod_reports import PodReportSink, ReportedCheckpoint, ReportTooLarge

router = APIRouter(prefix="/api/v1")
MAX_REPORT_BYTES = 1 << 20  # one metrics POST; the sidecar sends more in several


class SizeOut(BaseModel):
    size: int


class CheckpointIn(BaseModel):
    step: int = Field(ge=0)
    manifest: str | None = None
    problem: str | None = Field(None, max_length=4096)


class CheckpointsIn(BaseModel):
    checkpoints: list[CheckpointIn] = Field(max_length=1000)


class CountOut(BaseModel):
    count: int


def _sink(request: Request, run_id: str, attempt: int) -> PodReportSink:
    header = request.headers.get("authorization") or ""
    token = header[7:].strip() if header.startswith("Bearer ") else ""
    if not verify_report(request.app.state.code_key, token, run_id, attempt, time.time()):
        raise AuthError("missing, wrong or expired report token for this attempt")
    sink: PodReportSink | None = getattr(request.app.state, "pod_reports", None)
    if sink is None:
        raise NotFound("this server runs no cluster pods")
    return sink


@router.post("/runs/{run_id}/attempts/{attempt}/metrics", response_model=SizeOut)
async def post_metrics(run_id: str, attempt: int, offset: int, request: Request) -> SizeOut:
    sink = _sink(request, run_id, attempt)
    if offset < 0:
        raise UsageError("offset must be >= 0")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_REPORT_BYTES:
            raise ReportTooLarge(f"a metrics report is at most {MAX_REPORT_BYTES} bytes")
    key = AttemptKey(run_id, attempt)
    size = await run_in_threadpool(sink.append_metrics, key, offset, bytes(body))
    return SizeOut(size=size)


@router.put("/runs/{run_id}/attempts/{attempt}/checkpoints", response_model=CountOut)
def put_checkpoints(run_id: str, attempt: int, body: CheckpointsIn, request: Request) -> CountOut:
    sink = _sink(request, run_id, attempt)
    entries = [ReportedCheckpoint(c.step, c.manifest, c.problem) for c in body.checkpoints]
    sink.put_checkpoints(AttemptKey(run_id, attempt), entries)
    return CountOut(count=len(entries))
