"""The portal's actions: cancel, resume, rerun. Each is a plain form POST (works without
script, by keyboard), CSRF-checked, audited and carried out by the run service exactly
as the API's route does, so a refusal is the API's own answer (code and message) shown as
a page with the API's status. Success redirects to the run's page (post/redirect/get)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from taugrid.server.audit import audited
from taugrid.server.portal.access import Viewer, acting_viewer, form_fields
from taugrid.store.runs import Row

router = APIRouter(prefix="/portal", include_in_schema=False)
Acting = Annotated[Viewer, Depends(acting_viewer)]
MAX_OVERRIDES = 100


def _to_run(run_id: str) -> Response:
    return RedirectResponse(f"/portal/runs/{run_id}", status_code=303)


async def _change(request: Request, action: str, ref: str, do: Callable[[str], Row]) -> Response:
    def act() -> str:
        with audited(request, action, target=ref):
            return str(do(ref)["id"])

    return _to_run(await run_in_threadpool(act))


@router.post("/runs/{ref}/cancel")
async def cancel(ref: str, request: Request, who: Acting) -> Response:
    return await _change(request, "run.cancel", ref, who.svc.cancel)


@router.post("/runs/{ref}/resume")
async def resume(ref: str, request: Request, who: Acting) -> Response:
    return await _change(request, "run.resume", ref, who.svc.resume)


@router.post("/runs/{ref}/rerun")
async def rerun(ref: str, request: Request, who: Acting) -> Response:
    """A new run from the record, with ``--set`` style overrides, one per line."""
    fields = await form_fields(request)
    overrides = [o.strip() for o in fields.get("overrides", "").splitlines() if o.strip()]
    overrides = [o.removeprefix("--set").strip() for o in overrides][:MAX_OVERRIDES]
    key = fields.get("idempotency_key") or None  # a double click submits once

    def act() -> str:
        with audited(request, "run.submit", target=ref) as entry:
            made = who.svc.rerun(ref, overrides, key)
            entry["target"] = made["id"]
            entry["workspace"] = made["workspace"]
            return str(made["id"])

    return _to_run(await run_in_threadpool(act))
