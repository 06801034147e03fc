"""Quota arithmetic for the local scheduler: Kueue's cohort accounting, flat cohorts. Pure.

Kueue (v1beta2, ``pkg/cache/scheduler/resource_node.go``) keeps, per flavor and resource:

- a ClusterQueue's *guaranteed* quota: ``nominal - lendingLimit`` when a lending limit is
  set, else 0. It is never lent to the cohort;
- the cohort's pool: the sum over its members of what they lend (``nominal - guaranteed``);
- the pool's usage: the sum over members of their usage above their guaranteed quota.

What a ClusterQueue can still take is its unused guaranteed quota plus what the pool has
left, the latter capped by its borrowing limit: it may hold at most
``nominal + borrowingLimit`` in all. A queue without a cohort has its nominal quota and
nothing else. Usage above nominal is "borrowed".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from taugrid.domain.quota import RESOURCES, ClusterQueue, Resource, Workload

FlavorResource = tuple[str, Resource]
Demand = tuple[tuple[Resource, int], ...]  # only positive amounts, in RESOURCES order


def demand_of(w: Workload) -> Demand:
    return tuple((r, int(w.requests[r])) for r in RESOURCES if w.requests.get(r, 0) > 0)


@dataclass(frozen=True)
class Limit:
    """One ClusterQueue's quota for one flavor and resource, with Kueue's derived parts."""

    nominal: int
    borrowing_limit: int | None  # None: unbounded (within what the cohort lends)
    guaranteed: int  # never lent: nominal - lending_limit, or 0 without a lending limit

    @property
    def lendable(self) -> int:
        return self.nominal - self.guaranteed


class QuotaModel:
    """The static half: limits per queue, cohort membership and pool sizes."""

    def __init__(self, queues: Mapping[str, ClusterQueue]) -> None:
        self.queues = queues
        self.limits: dict[str, dict[FlavorResource, Limit]] = {}
        self.cohort_of: dict[str, str | None] = {}
        self.members: dict[str, list[str]] = {}
        self.pool: dict[str, dict[FlavorResource, int]] = {}
        self._scopes: dict[str, tuple[str, str]] = {}
        for name in sorted(queues):
            cq = queues[name]
            in_cohort = cq.cohort is not None
            limits: dict[FlavorResource, Limit] = {}
            for fq in cq.flavors:
                for res, rq in fq.resources.items():
                    guaranteed = 0
                    if in_cohort and rq.lending_limit is not None:
                        guaranteed = max(0, rq.nominal - rq.lending_limit)
                    limits[(fq.flavor, res)] = Limit(
                        rq.nominal, rq.borrowing_limit if in_cohort else 0, guaranteed
                    )
            self.limits[name] = limits
            self.cohort_of[name] = cq.cohort
            if cq.cohort is not None:
                self.members.setdefault(cq.cohort, []).append(name)
                pool = self.pool.setdefault(cq.cohort, {})
                for fr, lim in limits.items():
                    pool[fr] = pool.get(fr, 0) + lim.lendable

    def scope(self, cq: str) -> tuple[str, str]:
        """What a queue shares quota with: its cohort, or only itself."""
        found = self._scopes.get(cq)
        if found is None:
            cohort = self.cohort_of.get(cq)
            found = ("cohort", cohort) if cohort is not None else ("queue", cq)
            self._scopes[cq] = found
        return found

    def limit(self, cq: str, fr: FlavorResource) -> Limit | None:
        return self.limits.get(cq, {}).get(fr)

    def max_capacity(self, cq: str, fr: FlavorResource) -> int:
        """The most ``cq`` could ever hold of ``fr``: everything empty, the cohort lending all.

        Kueue's ``potentialAvailable``."""
        lim = self.limit(cq, fr)
        if lim is None:
            return 0
        cohort = self.cohort_of.get(cq)
        if cohort is None:
            return lim.nominal
        most = lim.guaranteed + self.pool[cohort].get(fr, 0)
        if lim.borrowing_limit is not None:
            most = min(most, lim.nominal + lim.borrowing_limit)
        return most


class Usage:
    """The mutable half: usage per queue and per cohort pool, updated incrementally."""

    def __init__(self, model: QuotaModel) -> None:
        self.model = model
        self.used: dict[str, dict[FlavorResource, int]] = {q: {} for q in model.limits}
        self.pool_used: dict[str, dict[FlavorResource, int]] = {c: {} for c in model.pool}

    def add(self, cq: str, flavor: str, demand: Demand, sign: int = 1) -> None:
        used = self.used.setdefault(cq, {})
        cohort = self.model.cohort_of.get(cq)
        limits = self.model.limits.get(cq, {})
        pool_used = self.pool_used[cohort] if cohort is not None else None
        for res, amount in demand:
            fr = (flavor, res)
            old = used.get(fr, 0)
            new = old + sign * amount
            used[fr] = new
            if pool_used is not None:
                lim = limits.get(fr)
                g = lim.guaranteed if lim is not None else 0
                delta = max(0, new - g) - max(0, old - g)
                if delta:
                    pool_used[fr] = pool_used.get(fr, 0) + delta

    def used_of(self, cq: str, fr: FlavorResource) -> int:
        return self.used.get(cq, {}).get(fr, 0)

    def from_cohort(self, cq: str, fr: FlavorResource) -> int:
        """What ``cq`` can still take from its cohort's pool (borrowing limit applied)."""
        cohort = self.model.cohort_of.get(cq)
        lim = self.model.limit(cq, fr)
        if cohort is None or lim is None:
            return 0
        free = self.model.pool[cohort].get(fr, 0) - self.pool_used[cohort].get(fr, 0)
        if lim.borrowing_limit is not None:
            u = self.used_of(cq, fr)
            stored = lim.lendable - max(0, u - lim.guaranteed) + lim.borrowing_limit
            free = min(free, stored)
        return free

    def available(self, cq: str, fr: FlavorResource) -> int:
        """Kueue's ``available``: how much more of ``fr`` the queue can take now (may be < 0)."""
        lim = self.model.limit(cq, fr)
        if lim is None:
            return 0
        u = self.used_of(cq, fr)
        if self.model.cohort_of.get(cq) is None:
            return lim.nominal - u
        return max(0, lim.guaranteed - u) + self.from_cohort(cq, fr)

    def fits(self, cq: str, flavor: str, demand: Demand, *, within_nominal: bool = False) -> bool:
        limits = self.model.limits.get(cq, {})
        for res, amount in demand:
            fr = (flavor, res)
            lim = limits.get(fr)
            if lim is None:
                return False
            if within_nominal and self.used_of(cq, fr) + amount > lim.nominal:
                return False
            if amount > self.available(cq, fr):
                return False
        return True

    def borrows(self, cq: str, flavor: str, demand: Demand) -> bool:
        """Whether adding ``demand`` would take ``cq`` above nominal in some resource."""
        limits = self.model.limits.get(cq, {})
        for res, amount in demand:
            lim = limits.get((flavor, res))
            if lim is None or self.used_of(cq, (flavor, res)) + amount > lim.nominal:
                return True
        return False

    def borrowed(self, cq: str, flavor: str, resources: Iterable[Resource]) -> int:
        """How far above nominal ``cq`` is, summed over ``resources`` of ``flavor``."""
        total = 0
        for res in resources:
            lim = self.model.limit(cq, (flavor, res))
            nominal = lim.nominal if lim is not None else 0
            total += max(0, self.used_of(cq, (flavor, res)) - nominal)
        return total

    def below_nominal(self, cq: str, flavor: str, resources: Iterable[Resource]) -> bool:
        for res in resources:
            lim = self.model.limit(cq, (flavor, res))
            if lim is None or self.used_of(cq, (flavor, res)) >= lim.nominal:
                return False
        return True
