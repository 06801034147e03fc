"""What can never be admitted, and TauGrid's per-user limits. Pure."""

from __future__ import annotations

from collections.abc import Mapping

from taugrid.domain.quota import ClusterQueue, Snapshot, UserLimit, Workload
from taugrid.domain.scheduling_quota import QuotaModel, demand_of
from taugrid.domain.scheduling_text import amount, flavor_types, never_sentence


def never_fits_reason(
    w: Workload, snap: Snapshot, model: QuotaModel | None = None
) -> tuple[str, str] | None:
    """(reason word, sentence) behind ``never_fits``."""
    cq = snap.queues.get(w.cluster_queue)
    if cq is None:
        names = ", ".join(sorted(snap.queues)) or "(none)"
        return ("QueueNotFound", f"queue {w.cluster_queue} does not exist; queues: {names}")
    model = model or QuotaModel(snap.queues)
    demand = demand_of(w)
    flavors = flavors_for(cq, w.gpu_type, snap)
    fits_somewhere = any(
        all(v <= model.max_capacity(cq.name, (f, r)) for r, v in demand) for f in flavors
    )
    if not fits_somewhere:
        offered = [fq.flavor for fq in cq.flavors]
        return never_sentence(w, demand, model, flavor_types(dict(snap.flavors), offered), flavors)
    lim = snap.user_limits.get(w.workspace)
    if lim is not None:
        gpus = w.requests.get("gpu", 0)
        if lim.max_running == 0:
            return ("UserLimit", f"the per-user limit in workspace {w.workspace} allows no runs")
        if lim.max_gpus is not None and gpus > lim.max_gpus:
            return (
                "UserLimit",
                f"asks for {amount('gpu', gpus)} but a user may hold at most"
                f" {lim.max_gpus} in workspace {w.workspace}, so it can never run",
            )
    return None


def flavors_for(cq: ClusterQueue, gpu_type: str | None, snap: Snapshot) -> tuple[str, ...]:
    """The queue's flavors that may serve a workload asking for ``gpu_type``, in order."""
    out = []
    for fq in cq.flavors:
        flavor = snap.flavors.get(fq.flavor)
        if gpu_type is None or (flavor is not None and flavor.gpu_type == gpu_type):
            out.append(fq.flavor)
    return tuple(out)


class UserBook:
    """Admitted runs and GPUs per (workspace, user), against ``Snapshot.user_limits``."""

    def __init__(self, limits: Mapping[str, UserLimit]) -> None:
        self.limits = limits
        self.user_runs: dict[tuple[str, str], int] = {}
        self.user_gpus: dict[tuple[str, str], int] = {}

    def blocked(self, w: Workload) -> str | None:
        """Why the per-user limit holds ``w`` back now, or None."""
        lim = self.limits.get(w.workspace)
        if lim is None:
            return None
        key = (w.workspace, w.user)
        running = self.user_runs.get(key, 0)
        want = w.requests.get("gpu", 0)
        if lim.max_running == 0:
            return f"the per-user limit in workspace {w.workspace} allows no runs"
        if lim.max_gpus is not None and want > lim.max_gpus:
            return (
                f"asks for {amount('gpu', want)} but a user may hold at most {lim.max_gpus}"
                f" in workspace {w.workspace}, so it can never run"
            )
        if lim.max_running is not None and running >= lim.max_running:
            return (
                f"user {w.user} already has {running} of {lim.max_running} allowed"
                f" {'run' if lim.max_running == 1 else 'runs'} admitted in workspace"
                f" {w.workspace}"
            )
        gpus = self.user_gpus.get(key, 0)
        if lim.max_gpus is not None and gpus + want > lim.max_gpus:
            return (
                f"user {w.user} holds {amount('gpu', gpus)} in workspace {w.workspace};"
                f" {want} more would pass the per-user limit of {lim.max_gpus}"
            )
        return None

    def copy(self) -> UserBook:
        book = UserBook(self.limits)
        book.user_runs = dict(self.user_runs)
        book.user_gpus = dict(self.user_gpus)
        return book

    def count(self, w: Workload, sign: int = 1) -> None:
        key = (w.workspace, w.user)
        self.user_runs[key] = self.user_runs.get(key, 0) + sign
        self.user_gpus[key] = self.user_gpus.get(key, 0) + sign * w.requests.get("gpu", 0)
