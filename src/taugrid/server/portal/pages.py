"""The portal's pages: each a thin read through the run service and the API's views,
rendered by a template. Fragments (``.../rows``, ``.../live``, ``.../charts``) are the
parts htmx refreshes when the event feed says something moved."""

from __future__ import annotations

import time
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response

from taugrid.domain.access import visible_workspaces
from taugrid.domain.rundiff import diff_runs
from taugrid.domain.states import RunState
from taugrid.errors import NotFound
from taugrid.server.health_routes import get_health_events, gpus_view
from taugrid.server.portal.access import Viewer, viewer
from taugrid.server.portal.charts import Series, line_chart
from taugrid.server.portal.web import page
from taugrid.server.services import RunService
from taugrid.server.views import queue_view, run_detail, run_row
from taugrid.store.runs import MAX_SEARCH_CHARS, RunFilter

router = APIRouter(prefix="/portal", include_in_schema=False)
PAGE_SIZE = 50
WITHIN = {"1h": 3600, "24h": 86400, "7d": 7 * 86400, "30d": 30 * 86400}
MAX_CHARTS = 8  # metric names charted on a run page
MAX_OVERLAID = 12  # runs overlaid in an experiment's charts
HEALTH_EVENTS_SHOWN = 50

Seen = Annotated[Viewer, Depends(viewer)]


def _base(who: Viewer, nav: str, **extra: Any) -> dict[str, Any]:
    return {"caller": who.caller, "csrf": who.csrf, "nav": nav, **extra}


@router.get("/")
def overview(request: Request, who: Seen) -> Response:
    svc = who.svc
    rows = svc.state_counts()
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["state"]] = counts.get(row["state"], 0) + row["runs"]
    # Pending pressure: how long the oldest queued run has waited.
    queued = [row["created_at"] for row in rows if row["state"] == "QUEUED"]
    waiting_since = min(queued, default=None)
    failed, _ = svc.list_runs(
        RunFilter(states=["FAILED"], visible=visible_workspaces(who.caller)), 8, None
    )
    return page(
        "overview.html",
        _base(
            who,
            "overview",
            counts=counts,
            waiting_since=waiting_since,
            states=[s.value for s in RunState],
            queues=queue_view(svc).queues,
            gpus=gpus_view(request),
            failures=[run_row(svc, r) for r in failed],
        ),
    )


def _filters(request: Request) -> dict[str, Any]:
    """The runs list's filters from the query string, as the form shows them."""
    q = request.query_params
    return {
        "state": [s.upper() for s in q.getlist("state") if s],
        "workspace": q.get("workspace") or "",
        "queue": q.get("queue") or "",
        "user": q.get("user") or "",
        "experiment": q.get("experiment") or "",
        "name": q.get("name") or "",
        "within": q.get("within") if q.get("within") in WITHIN else "",
        "q": (q.get("q") or "")[:MAX_SEARCH_CHARS],
    }


def _run_filter(f: dict[str, Any], who: Viewer, now: float) -> RunFilter:
    return RunFilter(
        states=f["state"],
        name=f["name"] or None,
        since=now - WITHIN[f["within"]] if f["within"] else None,
        workspace=f["workspace"] or None,
        experiment=f["experiment"] or None,
        queue=f["queue"] or None,
        submitter=f["user"] or None,
        text=f["q"] or None,
        visible=visible_workspaces(who.caller),
    )


def _query(f: dict[str, Any], **more: str) -> str:
    pairs = [("state", s) for s in f["state"]]
    pairs += [(k, v) for k, v in f.items() if k != "state" and v]
    pairs += [(k, v) for k, v in more.items() if v]
    return urlencode(pairs)


def runs_context(request: Request, who: Viewer) -> dict[str, Any]:
    f = _filters(request)
    cursor = request.query_params.get("cursor")
    rows, nxt = who.svc.list_runs(_run_filter(f, who, time.time()), PAGE_SIZE, cursor)
    return _base(
        who,
        "runs",
        filters=f,
        states=[s.value for s in RunState],
        within=list(WITHIN),
        runs=[run_row(who.svc, r) for r in rows],
        query=_query(f),
        rows_query=_query(f, cursor=cursor or ""),
        next_query=_query(f, cursor=nxt) if nxt else None,
        first_page=cursor is None,
    )


@router.get("/runs")
def runs(request: Request, who: Seen) -> Response:
    return page("runs.html", runs_context(request, who))


@router.get("/runs/rows")
def run_rows(request: Request, who: Seen) -> Response:
    """The table body alone: what the list swaps in when the feed moves."""
    return page("_run_rows.html", runs_context(request, who))


def _run_context(request: Request, who: Viewer, ref: str) -> dict[str, Any]:
    svc = who.svc
    detail = run_detail(svc, svc.get(ref))
    return _base(
        who,
        "runs",
        run=detail,
        active=not RunState(detail.state).terminal,
        may_change=who.may_change(detail.workspace, detail.submitter),
        rerun_key=f"portal-{detail.id}-{time.time_ns()}",
    )


@router.get("/runs/{ref}")
def run_page(ref: str, request: Request, who: Seen) -> Response:
    ctx = _run_context(request, who, ref)
    ctx.update(_logs_context(request, ctx["run"].id, ctx["run"].attempts))
    ctx.update(_charts_context(who, ctx["run"].id, ctx["active"]))
    _, files = who.svc.artifacts(ctx["run"].id)
    ctx["artifacts"] = files
    return page("run.html", ctx)


@router.get("/runs/{ref}/live")
def run_live(ref: str, request: Request, who: Seen) -> Response:
    """The parts of a run page that move: state, pending reason, actions, timeline."""
    return page("_run_live.html", _run_context(request, who, ref))


def _logs_context(request: Request, run_id: str, attempts: int) -> dict[str, Any]:
    q = request.query_params
    attempt = q.get("attempt")
    rank = q.get("rank")
    chosen = int(attempt) if attempt and attempt.isdigit() else max(attempts - 1, 0)
    params = {"attempt": str(chosen) if attempts else "", "q": q.get("grep") or ""}
    if rank and rank.isdigit():
        params["rank"] = rank
    follow = q.get("follow", "1") == "1"
    params["follow"] = "1" if follow else "0"
    return {
        "log_attempt": chosen,
        "log_rank": rank if rank and rank.isdigit() else "",
        "log_grep": q.get("grep") or "",
        "log_follow": follow,
        "log_stream": f"/portal/runs/{run_id}/logs/stream?"
        + urlencode([(k, v) for k, v in params.items() if v]),
        "attempt_numbers": list(range(attempts)),
    }


@router.get("/runs/{ref}/logs")
def logs_panel(ref: str, request: Request, who: Seen) -> Response:
    run = who.svc.get(ref)
    ctx = _base(who, "runs", run=run_row(who.svc, run))
    ctx.update(_logs_context(request, run["id"], run["attempt_count"]))
    return page("_logs.html", ctx)


def _charts_context(who: Viewer, run_id: str, active: bool) -> dict[str, Any]:
    _, points = who.svc.metrics(run_id, None)
    by_name = metric_series(points)
    names = sorted(by_name)
    shown = [
        (name, line_chart([Series(name, by_name[name])], title=name)) for name in names[:MAX_CHARTS]
    ]
    gpu = [(s["time"], s["utilization_pct"]) for s in who.svc.gpu_series(run_id)]
    if gpu:  # sampled by the server (NVML or DCGM), not logged by the workload
        since = [(t - gpu[0][0], busy) for t, busy in gpu]
        title = "GPU utilisation"
        shown.append((title, line_chart([Series("busy %", since)], title=title, x_label="s")))
    return {
        "charts": shown,
        "metric_names": names,
        "metric_points": len(points),
        "charts_live": active,
    }


@router.get("/runs/{ref}/charts")
def run_charts(ref: str, request: Request, who: Seen) -> Response:
    run = who.svc.get(ref)
    ctx = _base(who, "runs", run=run_row(who.svc, run))
    ctx.update(_charts_context(who, run["id"], not RunState(run["state"]).terminal))
    return page("_charts.html", ctx)


@router.get("/queues")
def queues(request: Request, who: Seen) -> Response:
    return page("queues.html", _base(who, "queues", queues=queue_view(who.svc)))


@router.get("/gpus")
def gpus(request: Request, who: Seen) -> Response:
    view = gpus_view(request)
    events = []
    if who.caller.platform_admin and view.monitor != "off":  # the API's admin-only events
        events = get_health_events(request, limit=HEALTH_EVENTS_SHOWN).events
    return page("gpus.html", _base(who, "gpus", gpus=view, events=events))


@router.get("/experiments")
def experiments(request: Request, who: Seen) -> Response:
    return page(
        "experiments.html",
        _base(who, "experiments", experiments=who.svc.experiments()),
    )


@router.get("/experiments/{name}")
def experiment(
    name: str,
    request: Request,
    who: Seen,
    metric: Annotated[list[str] | None, Query()] = None,
) -> Response:
    svc = who.svc
    flt = RunFilter(experiment=name, visible=visible_workspaces(who.caller))
    rows, _ = svc.list_runs(flt, 200, None)
    if not rows:
        raise NotFound(f"no experiment '{name}' among the runs you can see")
    shown = [run_row(svc, r) for r in rows]
    names = sorted({k for r in shown if r.metrics_last for k in r.metrics_last.values})
    chosen = [m for m in (metric or names[:2]) if m in names]
    overlaid = []
    series_of = {r.id: metric_series(svc.metrics(r.id, None)[1]) for r in shown[:MAX_OVERLAID]}
    for m in chosen:
        lines = [
            Series(f"{r.name} {r.id[-6:]}", series_of[r.id].get(m, []))
            for r in shown[:MAX_OVERLAID]
        ]
        overlaid.append((m, line_chart(lines, title=f"{m} across {name}")))
    return page(
        "experiment.html",
        _base(
            who,
            "experiments",
            name=name,
            runs=shown,
            metric_names=names,
            chosen=chosen,
            overlaid=overlaid,
            overlaid_max=MAX_OVERLAID,
        ),
    )


@router.get("/diff")
def diff(request: Request, who: Seen, a: str = "", b: str = "") -> Response:
    result = None
    if a and b:
        svc = who.svc
        ra, rb = run_detail(svc, svc.get(a)), run_detail(svc, svc.get(b))
        files_a = files_b = None
        if ra.spec.snapshot_digest != rb.spec.snapshot_digest:  # as `tau diff` does
            files_a, files_b = _snapshot_files(svc, ra.id), _snapshot_files(svc, rb.id)
        result = diff_runs(ra.model_dump(), rb.model_dump(), files_a, files_b)
    return page("diff.html", _base(who, "diff", a=a, b=b, result=result))


def _snapshot_files(svc: RunService, run_id: str) -> list[dict[str, Any]] | None:
    """A snapshot's files (path, size, sha256); None when the snapshot is gone."""
    try:
        return [dict(f) for f in svc.snapshot_listing(run_id)[2]]
    except NotFound:
        return None


def metric_series(points: list[dict[str, Any]]) -> dict[str, list[tuple[float, float]]]:
    """A run's logged points as one (step, value) series per metric name; a point
    logged without a step stands at its place in the log."""
    by_name: dict[str, list[tuple[float, float]]] = {}
    for i, p in enumerate(points):
        x = float(p["step"]) if p["step"] is not None else float(i)
        for name, value in p["values"].items():
            if value is not None:
                by_name.setdefault(name, []).append((x, float(value)))
    return by_name
