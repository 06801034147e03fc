"""``GET /api/v1/admin/cluster/check``: is the cluster ready for TauGrid (``tau admin
cluster check``, platform admins only).

The route only gathers: the cluster's facts through the port (``ports.cluster_facts``),
the policy in force and its drift (``Queueing.drift``, as ``tau admin policy drift``),
when each node's agent last reported (``server.health_cluster``) and what came of the
policy file at start (``server.policy_file``). The verdict is the pure
``domain.cluster_readiness.check_cluster``. A local server answers 400 ``usage``: the
check is about a cluster.
"""

from __future__ import annotations

import time

from fastapi import APIRouter, Request
from pydantic import BaseModel

from taugrid.domain.cluster_facts import AgentReports, DriftItem, PolicyFacts, PolicyFile
from taugrid.domain.cluster_readiness import check_cluster, ready, summary
from taugrid.errors import TauError, UsageError
from taugrid.ports.cluster_facts import ClusterInspector
from taugrid.server.health_cluster import AGENT_STALE_S, ClusterHealthController
from taugrid.server.policy_file import PolicyFileStart
from taugrid.server.queueing import Queueing
from taugrid.server.routes import require_admin

router = APIRouter(prefix="/api/v1")

LOCAL_MODE = (
    "this server runs workloads as local processes: tau admin cluster check checks a "
    "Kubernetes cluster (a server started with --executor kubernetes)"
)


class CheckOut(BaseModel):
    check: str
    subject: str
    status: str  # ok | warn | fail
    message: str
    fix: str


class ClusterCheckOut(BaseModel):
    ready: bool
    summary: str
    checks: list[CheckOut]


@router.get("/admin/cluster/check", response_model=ClusterCheckOut)
def get_cluster_check(request: Request) -> ClusterCheckOut:
    require_admin(request)
    state = request.app.state
    inspector: ClusterInspector | None = getattr(state, "cluster_inspector", None)
    if inspector is None:
        raise UsageError(LOCAL_MODE)
    facts = inspector.facts()
    policy = policy_facts(state.service.queueing, getattr(state, "policy_file", None))
    controller: ClusterHealthController | None = getattr(state, "health_cluster", None)
    agents = AgentReports(
        controller.agents_seen() if controller is not None else None, AGENT_STALE_S
    )
    checks = check_cluster(facts, policy, agents, now=time.time())
    return ClusterCheckOut(
        ready=ready(checks),
        summary=summary(checks),
        checks=[CheckOut(**c.to_dict()) for c in checks],
    )


def policy_facts(queueing: Queueing, started: PolicyFileStart | None) -> PolicyFacts:
    """The policy in force, its drift on the cluster and the policy file, as plain data."""
    current = queueing.policy
    drift: tuple[DriftItem, ...] | None
    error = ""
    try:
        found = queueing.drift() or []
        drift = tuple(DriftItem(d.object.kind, str(d.object), d.what, d.state) for d in found)
    except TauError as exc:  # Kueue's API missing or forbidden: said on the lines
        drift, error = None, " ".join(exc.message.split())
    pf = None
    if started is not None:
        in_force = started.text is not None and current.text == started.text
        pf = PolicyFile(started.path, started.outcome, started.error, in_force)
    return PolicyFacts(
        source=current.source,
        builtin=current.builtin,
        flavors={name: dict(f.node_labels) for name, f in current.domain.flavors.items()},
        cluster_queues=len(current.domain.queues),
        local_queues=len(current.domain.local_queues),
        drift=drift,
        drift_error=error,
        policy_file=pf,
    )
