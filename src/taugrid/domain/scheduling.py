"""The local scheduler: Kueue's admission semantics over a snapshot, plus per-user limits. Pure.

``schedule(snapshot)`` returns admissions, preemptions and, for every run left waiting, a
stable reason word and a sentence with numbers. The server applies the decisions and calls
it again on every change; a call admits everything that fits, in the order Kueue's repeated
scheduling cycles would:

1. Each ClusterQueue orders its pending workloads by priority (high first), then creation
   time, then id. Across queues the same key decides who goes first.
2. A first pass admits only workloads that fit without borrowing; a queue whose next
   workload would have to borrow waits there for the second pass, which admits in the same
   order with borrowing allowed (Kueue sorts heads that do not borrow first, so a queue
   taking back its own nominal quota is not beaten by a borrower).
3. A workload is admitted from the first of its queue's flavors (in the queue's order) in
   which every requested resource fits: all or nothing. A flavor with a GPU type serves only
   workloads asking for that type or for none.
4. StrictFIFO: a workload that cannot be admitted blocks everything behind it in its queue.
   BestEffortFIFO: later ones may pass it; it keeps its place. A workload that can never be
   admitted (no flavor for its GPU type, more than the queue can ever hold) blocks nobody:
   it is reported (NoMatchingFlavor, ExceedsMaxQuota) and the server rejects such runs at
   submit (``never_fits``).
5. A workload that does not fit may preempt (see ``scheduling_preempt``). Victims, and
   workloads already being evicted, hold their quota until they stop, so the scheduler keeps
   two books: *now* (everything admitted) and *future* (the victims a preemptor claimed
   gone, the preemptor's demand reserved in their place). Admission needs room in both: no
   smaller run takes the room a preemptor waits for, and nothing is over-committed while
   victims stop. A preemptor first claims the evicting workloads it chose earlier
   (``Admitted.preempted_by``), so it waits (WaitingForPreemptedWorkloads) without choosing
   new victims, and nobody else counts on them.
6. Per-user limits (TauGrid's own, per workspace: admitted runs and GPUs, evicting ones and
   waiting preemptors included) hold a workload back with reason UserLimit; it never blocks
   anyone else, not even in a StrictFIFO queue.
7. Pending reasons: WaitingForQuota, WaitingForPreemptedWorkloads, UserLimit, BlockedByHead,
   NoMatchingFlavor, ExceedsMaxQuota, and QueueNotFound for a run naming no existing queue.
   Positions count the runs of the queue still waiting after this call's admissions.

``schedule`` decides from nothing: the reference. The server's engine keeps a
``scheduling_state.Scheduler`` between passes, which decides exactly the same (a property
test holds it to ``schedule``) at the cost of what changed since its last pass.
"""

from __future__ import annotations

from taugrid.domain.quota import Resource, Snapshot, Workload
from taugrid.domain.scheduling_cycle import Cycle
from taugrid.domain.scheduling_limits import flavors_for, never_fits_reason
from taugrid.domain.scheduling_quota import demand_of
from taugrid.domain.scheduling_types import (
    Admission,
    Decisions,
    Overlaid,
    Pending,
    PendingReason,
    Preemption,
    QueueUsage,
    queue_order,
)

__all__ = [
    "Admission",
    "Decisions",
    "Overlaid",
    "Pending",
    "PendingReason",
    "Preemption",
    "QueueUsage",
    "flavors_for",
    "never_fits",
    "never_fits_reason",
    "queue_order",
    "queue_usage",
    "schedule",
]


def schedule(snap: Snapshot) -> Decisions:
    return Cycle(snap).run()


def never_fits(w: Workload, snap: Snapshot) -> str | None:
    """Why ``w`` can never be admitted, as a sentence, or None if some state admits it.

    Checked against an empty cluster with the whole cohort lending to ``w``'s queue: no
    flavor serving its GPU type, more than the queue can ever hold, or more GPUs than its
    user may ever run in its workspace."""
    found = never_fits_reason(w, snap)
    return None if found is None else found[1]


def queue_usage(snap: Snapshot) -> dict[str, QueueUsage]:
    """Per ClusterQueue: nominal quota, usage (evicting runs included: they still hold it),
    the part above nominal, and pending and admitted counts."""
    used: dict[str, dict[str, dict[Resource, int]]] = {}
    running: dict[str, int] = {}
    for a in snap.admitted:
        q = a.workload.cluster_queue
        running[q] = running.get(q, 0) + 1
        per = used.setdefault(q, {}).setdefault(a.flavor, {})
        for r, v in demand_of(a.workload):
            per[r] = per.get(r, 0) + v
    pending: dict[str, int] = {}
    for w in snap.pending:
        pending[w.cluster_queue] = pending.get(w.cluster_queue, 0) + 1
    out: dict[str, QueueUsage] = {}
    for name in sorted(snap.queues):
        cq = snap.queues[name]
        quota = {fq.flavor: {r: rq.nominal for r, rq in fq.resources.items()} for fq in cq.flavors}
        q_used: dict[str, dict[Resource, int]] = {
            f: dict.fromkeys(rs, 0) for f, rs in quota.items()
        }
        for f, per in used.get(name, {}).items():
            q_used.setdefault(f, {}).update(per)
        # Only a queue in a cohort borrows. Without one, usage above nominal is runs
        # that hold more than the queue has now (re-adopted after a restart with fewer
        # GPUs): shown as used/nominal, never as borrowed from a cohort that isn't there.
        borrowed = {
            f: {
                r: max(0, v - quota.get(f, {}).get(r, 0)) if cq.cohort else 0
                for r, v in per.items()
            }
            for f, per in q_used.items()
        }
        out[name] = QueueUsage(
            name, cq.cohort, quota, q_used, borrowed, pending.get(name, 0), running.get(name, 0)
        )
    return out
