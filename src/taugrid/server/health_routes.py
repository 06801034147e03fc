"""GPU health over the API (server/health.py does the work):

- ``GET /api/v1/gpus``: every GPU of the machine with its health, whether it is out of
  service and why, and the runs on it (only those the caller may see; the others are
  counted, never named);
- ``GET /api/v1/admin/health/events``: the monitor's decisions, newest first
  (``since``, ``level``, ``limit``), platform admins only;
- ``POST /api/v1/admin/health/return``: a GPU back into service after a human decision;
- ``POST /api/v1/admin/health/inject``: a fault through the monitor, for drills and demos;
- ``POST /api/v1/health/reports``: a cluster node's agent reports what it saw (and that it
  lives); an agent's token (user kind ``agent``) reaches this route and no other.

On a cluster server (``server/health_cluster.py``) ``GET /api/v1/gpus`` lists the GPU
nodes (``nodes``) and ``return`` takes a node.

A server without a monitor (``--health off``, or a cluster server: its nodes' GPUs are
the cluster's) answers ``monitor: "off"`` and its GPUs with health ``unknown``, never a
reassuring "healthy".
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from taugrid.domain.access import AGENT_KIND, Caller, can_read
from taugrid.domain.health import LEVEL_WORDS, Level
from taugrid.errors import NotFound, UsageError
from taugrid.health.replay import parse_record
from taugrid.server.health import HealthMonitor
from taugrid.server.health_cluster import ClusterHealthController, NodeReport
from taugrid.server.routes import require_admin

router = APIRouter(prefix="/api/v1")


class GpuOut(BaseModel):
    index: int
    uuid: str
    name: str
    health: str  # healthy | quarantined | unknown (no monitor)
    level: int | None = None
    level_words: str | None = None
    reason: str | None = None
    fault_at: float | None = None
    runs: list[str] = Field(default_factory=list)  # the caller's runs on it
    other_runs: int = 0  # runs of workspaces the caller cannot see


class GpusOut(BaseModel):
    node: str
    monitor: str  # on | shadow | off
    gpus: list[GpuOut]
    nodes: list[NodeOut] | None = None  # a cluster server's GPU nodes


class HealthEventOut(BaseModel):
    id: int
    at: float
    node: str
    gpu: str | None
    gpu_index: int | None
    source: str
    kind: str
    xid: int | None
    level: int
    action: str
    outcome: str
    reason: str
    runs: list[str] | None


class HealthEventsOut(BaseModel):
    events: list[HealthEventOut]


class NodeOut(BaseModel):
    node: str
    health: str  # healthy | unhealthy | unknown (no agent heard from lately)
    level: int
    cordoned_by_taugrid: bool
    agent_seen_at: float | None
    gpus: list[dict[str, Any]]
    out_of_service: list[dict[str, Any]]


class GpuRef(BaseModel):
    gpu: int = Field(ge=0)


class ReturnIn(BaseModel):
    gpu: int | None = Field(None, ge=0)  # one machine's GPU by index ...
    node: str | None = Field(None, min_length=1, max_length=253)  # ... or a cluster node


class ReportIn(BaseModel):
    node: str = Field(min_length=1, max_length=253)
    observations: list[dict[str, Any]] = Field(default_factory=list, max_length=10_000)
    gpus: list[dict[str, Any]] = Field(default_factory=list, max_length=64)
    gpu_pods: dict[str, list[str]] | None = None


class ReportOut(BaseModel):
    node: str
    level: int
    healthy: bool
    reason: str
    events: list[int]


class InjectIn(GpuRef):
    xid: int = Field(ge=0, le=65535)


class InjectOut(BaseModel):
    events: list[HealthEventOut]


def _monitor(request: Request) -> HealthMonitor | None:
    monitor: HealthMonitor | None = getattr(request.app.state, "health", None)
    return monitor


def _controller(request: Request) -> ClusterHealthController | None:
    found: ClusterHealthController | None = getattr(request.app.state, "health_cluster", None)
    return found


def _need_monitor(request: Request) -> HealthMonitor | ClusterHealthController:
    monitor = _monitor(request) or _controller(request)
    if monitor is None:
        raise UsageError(
            "GPU health monitoring is off on this server (tau server start --health on)"
        )
    return monitor


@router.get("/gpus", response_model=GpusOut)
def get_gpus(request: Request) -> GpusOut:
    return gpus_view(request)


def gpus_view(request: Request) -> GpusOut:
    """The GPUs as the caller (``request.state.caller``) may see them: health, what is
    out of service and why, what runs where (the API's and the portal's one view)."""
    monitor = _monitor(request)
    caller: Caller = request.state.caller
    svc = request.app.state.service
    controller = _controller(request)
    if controller is not None:
        nodes = _node_views(controller)
        mode = "shadow" if controller.shadow else "on"
        return GpusOut(node="cluster", monitor=mode, gpus=[], nodes=nodes)
    if monitor is None:
        return GpusOut(node="local", monitor="off", gpus=_unmonitored(request))
    devices = monitor.devices
    out_rows = {r["gpu"]: r for r in monitor.store.quarantined()}
    holders = monitor.holders()
    gpus = []
    for g in devices.devices():
        mine, others = _runs(svc.store, caller, holders.get(g.index, []))
        row = out_rows.get(g.uuid)
        gpus.append(
            GpuOut(
                index=g.index,
                uuid=g.uuid,
                name=g.name,
                health="quarantined" if row else "healthy",
                level=row["level"] if row else None,
                level_words=LEVEL_WORDS[Level(row["level"])] if row else None,
                reason=row["reason"] if row else None,
                fault_at=row["fault_at"] if row else None,
                runs=mine,
                other_runs=others,
            )
        )
    return GpusOut(node="local", monitor="shadow" if monitor.shadow else "on", gpus=gpus)


def _node_views(controller: ClusterHealthController) -> list[NodeOut]:
    return [NodeOut(**n) for n in controller.nodes_view()]


def _unmonitored(request: Request) -> list[GpuOut]:
    machine = getattr(request.app.state, "machine_gpus", ())
    return [GpuOut(index=g.index, uuid=g.uuid, name=g.name, health="unknown") for g in machine]


def _runs(store: Any, caller: Caller, run_ids: list[str]) -> tuple[list[str], int]:
    mine, others = [], 0
    for run_id in run_ids:
        workspace = store.workspace_of(run_id)
        if workspace is not None and can_read(caller, workspace):
            mine.append(run_id)
        else:
            others += 1
    return sorted(mine), others


@router.get("/admin/health/events", response_model=HealthEventsOut)
def get_health_events(
    request: Request, since: float | None = None, level: int = 0, limit: int = 200
) -> HealthEventsOut:
    require_admin(request)
    monitor = _need_monitor(request)
    if not 1 <= limit <= 1000:
        raise UsageError("limit must be between 1 and 1000")
    rows = monitor.store.events(since=since, min_level=level, limit=limit)
    return HealthEventsOut(events=[HealthEventOut(**_pick(r)) for r in rows])


@router.post("/admin/health/return", response_model=GpusOut)
def post_health_return(body: ReturnIn, request: Request) -> GpusOut:
    require_admin(request)
    monitor = _need_monitor(request)
    caller: Caller = request.state.caller
    if isinstance(monitor, ClusterHealthController):
        if body.node is None:
            raise UsageError("a cluster returns a node: tau admin health return NODE")
        if not monitor.return_node(body.node, caller.user):
            raise UsageError(f"node {body.node} is not out of service")
    else:
        if body.gpu is None:
            raise UsageError("this server returns a GPU by its index: tau admin health return N")
        if not monitor.return_gpu(body.gpu, caller.user):
            raise UsageError(f"GPU {body.gpu} is not out of service")
    return get_gpus(request)


@router.post("/health/reports", response_model=ReportOut)
async def post_health_report(body: ReportIn, request: Request) -> ReportOut:
    caller: Caller = request.state.caller
    if caller.kind != AGENT_KIND and not caller.platform_admin:
        raise NotFound("not found")
    controller = _controller(request)
    if controller is None:
        raise UsageError("this server takes no agent reports: it is not a cluster server")
    observations = [
        parse_record(doc, f"observations[{n}]", node=body.node)
        for n, doc in enumerate(body.observations)
    ]
    report = NodeReport(body.node, observations, body.gpus, body.gpu_pods)
    standing = await run_in_threadpool(controller.report, report)
    return ReportOut(
        node=standing.node,
        level=standing.level,
        healthy=standing.healthy,
        reason=standing.reason,
        events=list(standing.events),
    )


@router.post("/admin/health/inject", response_model=InjectOut)
async def post_health_inject(body: InjectIn, request: Request) -> InjectOut:
    require_admin(request)
    monitor = _monitor(request)
    if monitor is None:
        raise UsageError(
            "fault injection is a local server's drill; on a cluster, run the node's agent "
            "with --replay FILE"
        )
    handled = await run_in_threadpool(monitor.inject, body.gpu, body.xid)
    ids = [h.event_id for h in handled]
    rows = monitor.store.events(ids=ids, limit=max(1, len(ids)))
    return InjectOut(events=[HealthEventOut(**_pick(r)) for r in reversed(rows)])


def _pick(row: dict[str, Any]) -> dict[str, Any]:
    return {k: row[k] for k in HealthEventOut.model_fields}
