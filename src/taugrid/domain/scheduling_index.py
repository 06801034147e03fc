"""The waiting runs as the incremental scheduler keeps them between passes. Pure.

One ``Entry`` per run (what the cycle derives from a run and the policy alone), in lists
sorted by Kueue's order per scope (a cohort, or a queue without one), so that no pass sorts
the backlog; and, per user under a per-user limit, the scopes where that user has runs
waiting (such a user couples those scopes). Built afresh for each policy.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from operator import attrgetter

from taugrid.domain.quota import Snapshot, Workload
from taugrid.domain.scheduling_cycle import Entry
from taugrid.domain.scheduling_limits import flavors_for
from taugrid.domain.scheduling_quota import Demand, QuotaModel, demand_of

Scope = tuple[str, str]
User = tuple[str, str]  # (workspace, user)
_KEY = attrgetter("key")
_INSORTS = 32  # per scope and pass; past that, append and sort the list once
_Kind = tuple[Demand, tuple[str, ...], Scope, int]  # demand, flavors, scope, class


class Index:
    def __init__(self, policy: Snapshot, model: QuotaModel) -> None:
        self.policy = policy  # queues, flavors and user limits (no runs)
        self.model = model
        self.entries: dict[str, Entry] = {}  # by run id
        self.scoped: dict[Scope, list[Entry]] = {}  # sorted by queue_order
        self.user_scopes: dict[User, dict[Scope, int]] = {}  # waiting runs, limited users
        self._unsorted: set[Scope] = set()
        self._insorts: dict[Scope, int] = {}
        self._classes: dict[tuple[str, tuple[str, ...], tuple[int, ...]], int] = {}
        self._kinds: dict[tuple[str, str | None, tuple[int, ...]], _Kind] = {}

    def add(self, w: Workload, dirty: set[Scope], users: set[User]) -> Entry:
        e = self._entry(w)
        self.entries[w.id] = e
        runs = self.scoped.setdefault(e.scope, [])
        if e.scope in self._unsorted or not runs or runs[-1].key < e.key:
            runs.append(e)  # in order already, or sorted once in ``settle``
        elif self._insorts.get(e.scope, 0) < _INSORTS:
            insort(runs, e, key=_KEY)
            self._insorts[e.scope] = self._insorts.get(e.scope, 0) + 1
        else:  # a burst of arrivals (a restart, a policy change): one sort beats many
            runs.append(e)
            self._unsorted.add(e.scope)
        dirty.add(e.scope)
        if not e.plain:
            user = (w.workspace, w.user)
            per = self.user_scopes.setdefault(user, {})
            per[e.scope] = per.get(e.scope, 0) + 1
            users.add(user)
        return e

    def drop(self, e: Entry, dirty: set[Scope], users: set[User]) -> None:
        del self.entries[e.wid]
        runs = self.scoped[e.scope]
        if e.scope in self._unsorted:
            runs.remove(e)
        else:
            i = bisect_left(runs, e.key, key=_KEY)
            while runs[i] is not e:
                i += 1
            del runs[i]
        if not runs:
            del self.scoped[e.scope]
        dirty.add(e.scope)
        if not e.plain:
            user = (e.w.workspace, e.w.user)
            per = self.user_scopes[user]
            per[e.scope] -= 1
            if not per[e.scope]:
                del per[e.scope]
                if not per:
                    del self.user_scopes[user]
            users.add(user)

    def settle(self) -> None:
        """End of the changes of a pass: every list sorted again."""
        for scope in self._unsorted:
            if scope in self.scoped:
                self.scoped[scope].sort(key=_KEY)
        self._unsorted.clear()
        self._insorts.clear()

    def _entry(self, w: Workload) -> Entry:
        q = w.cluster_queue
        req = w.requests
        dense = (req.get("gpu", 0), req.get("cpu", 0), req.get("memory", 0))
        kind = self._kinds.get((q, w.gpu_type, dense))
        if kind is None:
            kind = self._kind(w, dense)
        demand, flavors, scope, cls = kind
        key = (-w.priority, w.created, w.id)
        plain = w.workspace not in self.policy.user_limits
        return Entry(w, demand, dense, flavors, key, scope, cls, plain, q, w.id)

    def _kind(self, w: Workload, dense: tuple[int, ...]) -> _Kind:
        """What runs of one queue, GPU type and request share."""
        q = w.cluster_queue
        cq = self.policy.queues.get(q)
        flavors = () if cq is None else flavors_for(cq, w.gpu_type, self.policy)
        cls = self._classes.setdefault((q, flavors, dense), len(self._classes))
        kind = (demand_of(w), flavors, self.model.scope(q), cls)
        self._kinds[(q, w.gpu_type, dense)] = kind
        return kind
