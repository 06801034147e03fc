"""Builders for the scheduler tests (no tests here): small snapshots in a line or two."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from taugrid.domain.quota import (
    RESOURCES,
    Admitted,
    ClusterQueue,
    Flavor,
    FlavorQuotas,
    ReclaimWithinCohort,
    Resource,
    ResourceQuota,
    Snapshot,
    UserLimit,
    WithinClusterQueue,
    Workload,
)
from taugrid.domain.scheduling import Decisions

Q = int | tuple[int, int | None, int | None]  # nominal, or (nominal, borrowing, lending)


def fq(flavor: str, **resources: Q) -> FlavorQuotas:
    out: dict[Resource, ResourceQuota] = {}
    for res in RESOURCES:
        q = resources.get(res)
        if q is None:
            continue
        out[res] = ResourceQuota(q) if isinstance(q, int) else ResourceQuota(*q)
    assert set(resources) <= set(RESOURCES), resources
    return FlavorQuotas(flavor, out)


def cq(
    name: str,
    *flavors: FlavorQuotas,
    cohort: str | None = None,
    strict: bool = False,
    within: WithinClusterQueue = "Never",
    reclaim: ReclaimWithinCohort = "Never",
) -> ClusterQueue:
    return ClusterQueue(
        name,
        tuple(flavors),
        cohort,
        "StrictFIFO" if strict else "BestEffortFIFO",
        within,
        reclaim,
    )


def wl(
    id: str,
    queue: str,
    *,
    gpu: int = 0,
    cpu: int = 0,
    memory: int = 0,
    prio: int = 0,
    at: float = 0.0,
    user: str = "ann",
    ws: str = "ws",
    gpu_type: str | None = None,
) -> Workload:
    amounts: dict[Resource, int] = {"gpu": gpu, "cpu": cpu, "memory": memory}
    req = {res: v for res, v in amounts.items() if v}
    return Workload(id, queue, ws, user, prio, at, req, gpu_type)


def adm(w: Workload, flavor: str = "f", *, at: float = 0.0, evicting: bool = False) -> Admitted:
    return Admitted(w, flavor, at, evicting)


def snap(
    queues: Iterable[ClusterQueue],
    admitted: Iterable[Admitted] = (),
    pending: Iterable[Workload] = (),
    *,
    flavors: Iterable[Flavor] = (),
    limits: Mapping[str, UserLimit] | None = None,
) -> Snapshot:
    qs = {q.name: q for q in queues}
    fl = {f.name: f for f in flavors}
    for q in qs.values():
        for f in q.flavors:
            fl.setdefault(f.flavor, Flavor(f.flavor))
    return Snapshot(qs, fl, tuple(admitted), tuple(pending), dict(limits or {}))


def admitted_ids(d: Decisions) -> list[str]:
    return [a.workload_id for a in d.admissions]


def victims(d: Decisions) -> list[str]:
    return sorted(p.victim_id for p in d.preemptions)
