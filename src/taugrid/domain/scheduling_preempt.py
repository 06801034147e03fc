"""Victim search for the local scheduler: Kueue's classical preemption. Pure.

Candidates:

- ``withinClusterQueue``: admitted workloads of the preemptor's own queue with lower
  priority (``LowerPriority``), or also equal priority but created later
  (``LowerOrNewerEqualPriority``);
- ``reclaimWithinCohort``: admitted workloads of the other queues of the cohort that are
  borrowing (above nominal) in a resource the preemptor lacks, with lower priority
  (``LowerPriority``) or any priority (``Any``). Reclaiming is only tried while the
  preemptor's queue is below its nominal quota in those resources, and then the preemptor
  must fit within its nominal quota: it takes back what it lent, no more.

Workloads already being evicted come first: the ones this preemptor chose in an earlier
cycle (``Admitted.preempted_by``; nobody else may count on them), then others under the same
rules as any candidate (they free their quota anyway). So a preemptor whose need they cover
chooses no new victim and waits for them; the caller never preempts them again. Then: other
queues first (those borrowing most first), then lower priority, then the most recently
admitted.

Victims are removed in that order until the preemptor fits (a cohort victim is skipped once
its queue stops borrowing), then each one but the last is put back if the preemptor still
fits without it: a minimal set, as Kueue does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from taugrid.domain.quota import Admitted, ClusterQueue, Resource, Workload
from taugrid.domain.scheduling_quota import Demand, Usage


@dataclass(frozen=True)
class Victim:
    admitted: Admitted
    demand: Demand
    own_queue: bool  # False: reclaimed from another queue of the cohort
    claimed: bool = False  # evicting already, by this same preemptor's earlier decision

    @property
    def cluster_queue(self) -> str:
        return self.admitted.workload.cluster_queue


def may_preempt_within(policy: str, preemptor: Workload, victim: Workload) -> bool:
    if policy == "LowerPriority":
        return victim.priority < preemptor.priority
    if policy == "LowerOrNewerEqualPriority":
        return victim.priority < preemptor.priority or (
            victim.priority == preemptor.priority and victim.created > preemptor.created
        )
    return False


def may_reclaim(policy: str, preemptor: Workload, victim: Workload) -> bool:
    if policy == "LowerPriority":
        return victim.priority < preemptor.priority
    return policy == "Any"


def find_victims(
    usage: Usage,
    cq: ClusterQueue,
    flavor: str,
    preemptor: Workload,
    demand: Demand,
    admitted: Mapping[tuple[str, str], Sequence[tuple[Admitted, Demand]]],
    taken: set[str],
    claims: Sequence[tuple[Admitted, Demand]] = (),
    kept_for: Mapping[str, str] | None = None,
) -> list[Victim] | None:
    """A minimal set of victims after which ``preemptor`` fits ``flavor`` of ``cq`` in
    ``usage`` (which is left as it was), or None; [] when it fits already.

    ``admitted`` indexes the workloads that may be chosen by (queue, flavor); ``taken`` are
    victims already chosen this cycle; ``claims`` are the evicting workloads this preemptor
    chose earlier (first in line, whatever the policy), and ``kept_for`` maps every such
    workload to its preemptor so that no other preemptor counts on it."""
    need = [r for r, v in demand if v > usage.available(cq.name, (flavor, r))]
    if not need:
        return []
    kept_for = kept_for or {}
    mine = [
        Victim(adm, d, adm.workload.cluster_queue == cq.name, claimed=True)
        for adm, d in claims
        if adm.flavor == flavor and adm.workload.id not in taken
    ]
    own: list[Victim] = []
    if cq.within_cluster_queue != "Never":
        for adm, d in admitted.get((cq.name, flavor), ()):
            w = adm.workload
            if w.id in taken or w.id in kept_for or not _touches(d, need):
                continue
            if may_preempt_within(cq.within_cluster_queue, preemptor, w):
                own.append(Victim(adm, d, True))
    others: list[tuple[int, Victim]] = []
    cohort = cq.cohort
    # Reclaiming is tried only while the queue is below its nominal quota in what it needs.
    if (
        cq.reclaim_within_cohort != "Never"
        and cohort is not None
        and usage.below_nominal(cq.name, flavor, need)
    ):
        for member in usage.model.members[cohort]:
            if member == cq.name:
                continue
            lent = usage.borrowed(member, flavor, need)
            if lent <= 0:
                continue
            for adm, d in admitted.get((member, flavor), ()):
                w = adm.workload
                if w.id in taken or w.id in kept_for or not _touches(d, need):
                    continue
                if may_reclaim(cq.reclaim_within_cohort, preemptor, w):
                    others.append((lent, Victim(adm, d, False)))
    if not _could_free(usage, cq.name, flavor, demand, need, mine, own, others):
        return None
    own.sort(key=lambda v: _order(v, 0))
    if others:
        both = [(_order(v, -lent), v) for lent, v in others] + [(_order(v, 0), v) for v in own]
        both.sort(key=lambda kv: kv[0])
        found = _minimal(
            usage, cq.name, flavor, demand, need, mine + [v for _, v in both], borrow=False
        )
        if found is not None:
            return found
    if not own and not mine:
        return None
    return _minimal(usage, cq.name, flavor, demand, need, mine + own, borrow=True)


def _could_free(
    usage: Usage,
    cq: str,
    flavor: str,
    demand: Demand,
    need: Sequence[Resource],
    mine: Sequence[Victim],
    own: Sequence[Victim],
    others: Sequence[tuple[int, Victim]],
) -> bool:
    """Whether every candidate gone could make room at all: taking a run's usage away
    raises what ``cq`` can take of a resource by at most that usage (its own unused
    guaranteed quota, the cohort's pool and its borrowing limit each grow by no more), so
    if all the candidates together hold too little of a needed resource, no set of them
    is enough. A cheap way to the answer the search itself would reach."""
    for res, amount in demand:
        if res not in need:
            continue
        short = amount - usage.available(cq, (flavor, res))
        for group in (mine, own, (v for _, v in others)):
            for v in group:
                for r, x in v.demand:
                    if r == res:
                        short -= x
            if short <= 0:
                break
        if short > 0:
            return False
    return True


def _order(v: Victim, lent: int) -> tuple[bool, bool, int, int, float, str]:
    """Kueue's candidate order: already evicting first (they free quota anyway), then other
    queues (those borrowing most first), then lower priority, then most recently admitted."""
    w = v.admitted.workload
    return (not v.admitted.evicting, v.own_queue, lent, w.priority, -v.admitted.admitted_at, w.id)


def _touches(demand: Demand, need: Sequence[Resource]) -> bool:
    return any(r in need for r, _ in demand)


def _minimal(
    usage: Usage,
    cq: str,
    flavor: str,
    demand: Demand,
    need: Sequence[Resource],
    candidates: Sequence[Victim],
    *,
    borrow: bool,
) -> list[Victim] | None:
    removed: list[Victim] = []
    fits = False
    for v in candidates:
        if not (v.own_queue or v.claimed) and usage.borrowed(v.cluster_queue, flavor, need) <= 0:
            continue  # that queue gave back what it borrowed already
        usage.add(v.cluster_queue, flavor, v.demand, -1)
        removed.append(v)
        if usage.fits(cq, flavor, demand, within_nominal=not borrow):
            fits = True
            break
    if not fits:
        for v in removed:
            usage.add(v.cluster_queue, flavor, v.demand)
        return None
    kept = [removed[-1]]
    for v in reversed(removed[:-1]):
        usage.add(v.cluster_queue, flavor, v.demand)
        if usage.fits(cq, flavor, demand, within_nominal=not borrow):
            continue  # not needed after all
        usage.add(v.cluster_queue, flavor, v.demand, -1)
        kept.append(v)
    for v in kept:
        usage.add(v.cluster_queue, flavor, v.demand)
    kept.reverse()
    return kept
