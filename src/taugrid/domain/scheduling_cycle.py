"""The local scheduler's cycle over one snapshot; ``scheduling`` documents the rules. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter
from typing import Literal

from taugrid.domain.quota import RESOURCES, Admitted, Resource, Snapshot, Workload
from taugrid.domain.scheduling_limits import UserBook, flavors_for, never_fits_reason
from taugrid.domain.scheduling_preempt import Victim, find_victims
from taugrid.domain.scheduling_quota import Demand, QuotaModel, Usage, demand_of
from taugrid.domain.scheduling_text import amount, no_room, preempting
from taugrid.domain.scheduling_types import (
    Admission,
    Decisions,
    Pending,
    Preemption,
    queue_order,
)


@dataclass(slots=True)
class _Entry:
    w: Workload
    demand: Demand
    dense: tuple[int, ...]
    flavors: tuple[str, ...]
    position: int = 0  # among the runs of its queue left waiting, set at the end
    total: int = 0
    reason: str = ""
    detail: tuple[str, ...] = ()


_ADMITTED, _DEFERRED, _WAITING, _FAILED, _SKIPPED = range(5)
assert RESOURCES == ("gpu", "cpu", "memory"), "_Entry.dense spells the resources out"
# (queue, flavor) -> (cohort version, failed requests, a few of them to test dominance)
_Memo = dict[tuple[str, str], tuple[int, set[tuple[int, ...]], list[tuple[int, ...]]]]


class Cycle:
    """One call of ``schedule``: the two passes over the pending workloads."""

    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap
        self.model = QuotaModel(snap.queues)
        self.now = Usage(self.model)  # what is held: everything admitted, evicting included
        self.future = Usage(self.model)  # claimed victims gone, their preemptors reserved
        self.runs: dict[tuple[str, str], int] = {}
        self.candidates: dict[tuple[str, str], list[tuple[Admitted, Demand]]] = {}
        self.users = UserBook(snap.user_limits)
        self.taken: set[str] = set()
        self.reserved_by: dict[tuple[tuple[str, str], str], list[str]] = {}
        # Valid while nothing changes in the queue's cohort (``version``): the room left per
        # queue and flavor, and failed victim searches (a run asking at least as much of
        # every resource fails too).
        self.version: dict[tuple[str, str], int] = {}
        self.rooms: dict[tuple[str, str], tuple[int, tuple[int, ...]]] = {}
        self.no_victims: _Memo = {}
        self.most: dict[tuple[str, str], tuple[int, ...]] = {}  # max_capacity per resource
        self.admissions: list[Admission] = []
        self.preemptions: list[Preemption] = []
        self.waiting: dict[str, _Entry] = {}
        self.behind: dict[str, list[_Entry]] = {}  # StrictFIFO head -> the runs it blocks
        self.flavor_cache: dict[tuple[str, str | None], tuple[str, ...]] = {}
        self.no_room_text: dict[tuple[str, tuple[str, ...], Demand], str] = {}
        self.admitted_ids: set[str] = set()
        # Evicting workloads kept for the pending preemptor that chose them.
        waiting_ids = {w.id for w in snap.pending}
        self.claims: dict[str, list[tuple[Admitted, Demand]]] = {}
        self.kept_for: dict[str, str] = {}
        for a in snap.admitted:
            if a.evicting and a.preempted_by is not None and a.preempted_by in waiting_ids:
                self.claims.setdefault(a.preempted_by, []).append((a, demand_of(a.workload)))
                self.kept_for[a.workload.id] = a.preempted_by
        for a in snap.admitted:
            w = a.workload
            d = demand_of(w)
            key = (w.cluster_queue, a.flavor)
            self.admitted_ids.add(w.id)
            self.now.add(w.cluster_queue, a.flavor, d)
            self.runs[key] = self.runs.get(key, 0) + 1
            self.future.add(w.cluster_queue, a.flavor, d)
            self.candidates.setdefault(key, []).append((a, d))
            self.users.count(w)

    # -- the two passes -----------------------------------------------------------------
    def run(self) -> Decisions:
        entries = todo = self._entries()
        while todo:
            blocked = self._passes(todo)
            # A StrictFIFO head waiting for quota may have reached its user's limit since
            # (another run of that user was admitted later in the cycle). Held back by that
            # limit it blocks nobody, so the runs behind it get their turn: what the next
            # cycle would do anyway.
            todo = []
            for head in blocked.values():
                held = self.users.blocked(head.w) if head.reason == "WaitingForQuota" else None
                if held is not None:
                    self._wait(head, "UserLimit", held, result=_SKIPPED)
                    todo += self.behind.pop(head.w.id, [])
            todo.sort(key=lambda e: queue_order(e.w))
        # Positions among the runs still waiting once this cycle's admissions are applied.
        waiting = self.waiting
        left = [e for e in entries if e.w.id in waiting]
        totals: dict[str, int] = {}
        for e in left:
            totals[e.w.cluster_queue] = e.position = totals.get(e.w.cluster_queue, 0) + 1
        for e in left:
            e.total = totals[e.w.cluster_queue]
        pending = {e.w.id: self._pending(e) for e in left}
        return Decisions(tuple(self.admissions), tuple(self.preemptions), pending)

    def _passes(self, entries: list[_Entry]) -> dict[str, _Entry]:
        blocked: dict[str, _Entry] = {}
        stopped: set[str] = set()
        deferred: list[_Entry] = []
        for e in entries:
            q = e.w.cluster_queue
            if q in blocked:
                self._block(e, blocked[q])
            elif q in stopped:
                deferred.append(e)
            else:
                result = self._step(e, borrow=False)
                if result == _DEFERRED:
                    stopped.add(q)
                    deferred.append(e)
                elif result in (_WAITING, _FAILED) and self._strict(q):
                    blocked[q] = e
        for e in deferred:
            q = e.w.cluster_queue
            if q in blocked:
                self._block(e, blocked[q])
            elif self._step(e, borrow=True) in (_WAITING, _FAILED) and self._strict(q):
                blocked[q] = e
        return blocked

    def _strict(self, q: str) -> bool:
        return self.snap.queues[q].strategy == "StrictFIFO"

    def _entries(self) -> list[_Entry]:
        admitted = self.admitted_ids
        ordered = [w for w in self.snap.pending if w.id not in admitted]
        # queue_order, as two stable C-level sorts (a reversed sort keeps ties in order).
        ordered.sort(key=attrgetter("created", "id"))
        ordered.sort(key=attrgetter("priority"), reverse=True)
        shapes: dict[tuple[int, ...], Demand] = {}
        flavors = self.flavor_cache
        out = []
        for w in ordered:
            q = w.cluster_queue
            req = w.requests
            dense = (req.get("gpu", 0), req.get("cpu", 0), req.get("memory", 0))
            demand = shapes.get(dense)
            if demand is None:
                shapes[dense] = demand = demand_of(w)
            fl = flavors.get((q, w.gpu_type))
            if fl is None:
                fl = self._flavors(w)
            out.append(_Entry(w, demand, dense, fl))
        return out

    def _flavors(self, w: Workload) -> tuple[str, ...]:
        key = (w.cluster_queue, w.gpu_type)
        found = self.flavor_cache.get(key)
        if found is None:
            cq = self.snap.queues.get(w.cluster_queue)
            found = () if cq is None else flavors_for(cq, w.gpu_type, self.snap)
            self.flavor_cache[key] = found
        return found

    # -- one workload ---------------------------------------------------------------------
    def _step(self, e: _Entry, *, borrow: bool) -> int:
        w, d = e.w, e.demand
        q = w.cluster_queue
        if not e.flavors or not self._could_ever_fit(e):
            never = never_fits_reason(w, self.snap, self.model)
            if never is not None:
                return self._wait(e, never[0], never[1], result=_SKIPPED)
        held = self.users.blocked(w)
        if held is not None:
            # A per-user limit says nothing about the queue's capacity: if the run held back
            # blocked a StrictFIFO queue, one user at their limit would stall every other
            # user of the queue, which is what the limit exists to prevent. So it is skipped.
            return self._wait(e, "UserLimit", held, result=_SKIPPED)
        g, c, m = e.dense
        for f in e.flavors:
            cg, cc, cm = self._room(q, f)
            if (g <= cg or not g) and (c <= cc or not c) and (m <= cm or not m):
                if not borrow and (self.now.borrows(q, f, d) or self.future.borrows(q, f, d)):
                    return _DEFERRED
                self._admit(e, f)
                return _ADMITTED
        cq = self.snap.queues[q]
        if cq.within_cluster_queue != "Never" or (
            cq.reclaim_within_cohort != "Never" and cq.cohort is not None
        ):
            claims = self.claims.get(w.id, [])
            flavors = e.flavors
            if claims:  # where its victims are stopping first: no new victims elsewhere
                flavors = (claims[0][0].flavor, *[f for f in flavors if f != claims[0][0].flavor])
            for f in flavors:
                if not claims and self._failed_before(self.no_victims, e, f):
                    continue
                victims = find_victims(
                    self.future, cq, f, w, d, self.candidates, self.taken, claims, self.kept_for
                )
                if victims is None:
                    if not claims:
                        self._remember_failure(self.no_victims, e, f)
                    continue
                # [] : it fits once runs being evicted have stopped; it waits and keeps the room.
                self._preempt(e, f, victims)
                self._reserve(w, d, f)
                fresh = [v.admitted.workload.id for v in victims if not v.admitted.evicting]
                stopping = [v.admitted.workload.id for v in victims if v.admitted.evicting]
                return self._wait(
                    e,
                    "WaitingForPreemptedWorkloads",
                    f,
                    str(len(fresh)),
                    *fresh,
                    *stopping,
                    result=_WAITING,
                )
        return self._wait(e, "WaitingForQuota", result=_FAILED)

    def _failed_before(self, memo: _Memo, e: _Entry, flavor: str) -> bool:
        """Whether a run asking no more of any resource already failed here since the
        queue's cohort last changed. (Runs of one queue are tried in its order, so for
        preemption the earlier run also had at least the same candidates.)"""
        q = e.w.cluster_queue
        known = memo.get((q, flavor))
        if known is None or known[0] != self.version.get(self.model.scope(q), 0):
            return False
        if e.dense in known[1]:
            return True
        mine = e.dense
        return any(all(a >= b for a, b in zip(mine, d, strict=True)) for d in known[2])

    def _remember_failure(self, memo: _Memo, e: _Entry, flavor: str) -> None:
        q = e.w.cluster_queue
        version = self.version.get(self.model.scope(q), 0)
        known = memo.get((q, flavor))
        if known is None or known[0] != version:
            memo[(q, flavor)] = (version, {e.dense}, [e.dense])
        else:
            known[1].add(e.dense)
            if len(known[2]) < 8:
                known[2].append(e.dense)

    def _room(self, q: str, flavor: str) -> tuple[int, ...]:
        """What ``q`` can still take of each resource of ``flavor`` in both books (room in
        both is what admission needs), recomputed only after its cohort changed."""
        version = self.version.get(self.model.scope(q), 0)
        known = self.rooms.get((q, flavor))
        if known is not None and known[0] == version:
            return known[1]
        now, future = self.now, self.future
        room = tuple(
            min(now.available(q, (flavor, r)), future.available(q, (flavor, r))) for r in RESOURCES
        )
        self.rooms[(q, flavor)] = (version, room)
        return room

    def _changed(self, q: str) -> None:
        scope = self.model.scope(q)
        self.version[scope] = self.version.get(scope, 0) + 1

    def _could_ever_fit(self, e: _Entry) -> bool:
        g, c, m = e.dense
        for f in e.flavors:
            key = (e.w.cluster_queue, f)
            most = self.most.get(key)
            if most is None:
                most = tuple(self.model.max_capacity(key[0], (f, r)) for r in RESOURCES)
                self.most[key] = most
            mg, mc, mm = most
            if (g <= mg or not g) and (c <= mc or not c) and (m <= mm or not m):
                return True
        return False

    def _admit(self, e: _Entry, flavor: str) -> None:
        w, d = e.w, e.demand
        q = w.cluster_queue
        borrowed: dict[Resource, int] = {}
        for r, v in d:
            lim = self.model.limit(q, (flavor, r))
            nominal = lim.nominal if lim is not None else 0
            before = self.now.used_of(q, (flavor, r))
            took = max(0, before + v - nominal) - max(0, before - nominal)
            if took > 0:
                borrowed[r] = took
        self.now.add(q, flavor, d)
        self.future.add(q, flavor, d)
        self._changed(q)
        key = (q, flavor)
        self.runs[key] = self.runs.get(key, 0) + 1
        self.users.count(w)
        self.admissions.append(Admission(w.id, q, flavor, borrowed))
        self.waiting.pop(w.id, None)

    def _reserve(self, w: Workload, d: Demand, flavor: str) -> None:
        q = w.cluster_queue
        self.future.add(q, flavor, d)
        self._changed(q)
        self.users.count(w)  # its user's slot is held for it too
        self.reserved_by.setdefault((self.model.scope(q), flavor), []).append(w.id)

    def _preempt(self, e: _Entry, flavor: str, victims: list[Victim]) -> None:
        w = e.w
        q = w.cluster_queue
        need = ", ".join(amount(r, v) for r, v in e.demand)
        for v in victims:
            vw = v.admitted.workload
            self.taken.add(vw.id)
            self.future.add(vw.cluster_queue, flavor, v.demand, -1)
            self._changed(vw.cluster_queue)
            if v.admitted.evicting:
                continue  # already on its way out: claimed, never preempted twice
            if v.own_queue:
                reason: Literal["InClusterQueue", "InCohortReclamation"] = "InClusterQueue"
                message = (
                    f"preempted by {w.id} (priority {w.priority}) in queue {q}, which needs"
                    f" {need} of flavor {flavor}; this run has priority {vw.priority}"
                )
            else:
                reason = "InCohortReclamation"
                message = (
                    f"queue {q} reclaims quota of flavor {flavor} it lent to cohort"
                    f" {self.model.cohort_of.get(q)}: {w.id} (priority {w.priority}) needs"
                    f" {need}; queue {vw.cluster_queue} was using more than its nominal quota"
                )
            self.preemptions.append(Preemption(vw.id, w.id, reason, message))

    def _wait(self, e: _Entry, reason: str, *detail: str, result: int) -> int:
        e.reason = reason
        e.detail = detail
        self.waiting[e.w.id] = e
        return result

    def _block(self, e: _Entry, head: _Entry) -> None:
        self.behind.setdefault(head.w.id, []).append(e)
        self._wait(e, "BlockedByHead", head.w.id, head.reason, result=_FAILED)

    # -- sentences ------------------------------------------------------------------------
    def _pending(self, e: _Entry) -> Pending:
        w, q = e.w, e.w.cluster_queue
        if e.reason == "WaitingForQuota":
            key = (q, e.flavors, e.demand)
            text = self.no_room_text.get(key)
            if text is None:
                text = no_room(
                    w, e.demand, e.flavors, self.now, self.future, self.runs, self.reserved_by
                )
                self.no_room_text[key] = text
        elif e.reason == "WaitingForPreemptedWorkloads":
            n_fresh = int(e.detail[1])
            fresh, stopping = e.detail[2 : 2 + n_fresh], e.detail[2 + n_fresh :]
            text = preempting(q, e.detail[0], e.demand, fresh, stopping)
        elif e.reason == "BlockedByHead":
            text = (
                f"queue {q} is StrictFIFO and its head {e.detail[0]} cannot start yet"
                f" ({e.detail[1]}); nothing behind the head is admitted before it"
            )
        else:
            text = e.detail[0]
        text += f"; position {e.position} of {e.total} in queue {q}"
        return Pending(w.id, q, e.position, e.reason, text)
