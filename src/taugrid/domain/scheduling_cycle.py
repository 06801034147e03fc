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


@dataclass(slots=True, eq=False)
class Entry:
    """A pending workload with what the cycle derives from it and the policy alone. It
    holds nothing about one call's outcome (that is the cycle's ``waiting``), so the
    incremental scheduler keeps entries from one pass to the next."""

    w: Workload
    demand: Demand
    dense: tuple[int, ...]
    flavors: tuple[str, ...]
    # For the incremental scheduler (``scheduling_state``), unused by the reference cycle:
    # its place in ``queue_order``, its scope, its queue, flavors and request interned, and
    # whether quota alone decides for it (its workspace has no per-user limit).
    key: tuple[int, float, str] = (0, 0.0, "")
    scope: tuple[str, str] = ("", "")
    cls: int = -1
    plain: bool = False
    q: str = ""  # w.cluster_queue
    wid: str = ""  # w.id
    seen: int = 0  # the last pass whose snapshot had it


# What a waiting entry's call said: the entry, reason word, details for the sentence.
Wait = tuple[Entry, str, tuple[str, ...]]
ADMITTED, DEFERRED, WAITING, FAILED, SKIPPED = range(5)
assert RESOURCES == ("gpu", "cpu", "memory"), "Entry.dense spells the resources out"
# (queue, flavor) -> (cohort version, failed requests, a few of them to test dominance)
_Memo = dict[tuple[str, str], tuple[int, set[tuple[int, ...]], list[tuple[int, ...]]]]


class Cycle:
    """One call of ``schedule``: the two passes over the pending workloads."""

    def __init__(
        self, snap: Snapshot, *, model: QuotaModel | None = None, users: UserBook | None = None
    ) -> None:
        """``model``: ``snap.queues`` as a QuotaModel, when the caller keeps one; ``users``:
        the per-user counts of every admitted run, when ``snap`` holds only part of them
        (the incremental scheduler decides independent parts of the cluster apart)."""
        self.snap = snap
        self.model = model if model is not None else QuotaModel(snap.queues)
        self.now = Usage(self.model)  # what is held: everything admitted, evicting included
        self.future = Usage(self.model)  # claimed victims gone, their preemptors reserved
        self.runs: dict[tuple[str, str], int] = {}
        self.candidates: dict[tuple[str, str], list[tuple[Admitted, Demand]]] = {}
        self.users = users if users is not None else UserBook(snap.user_limits)
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
        # Where in the call each decision was made: (round, pass, queue order of the run
        # deciding, victim index). The full call decides in that order, so decisions made
        # separately for independent parts merge back into the same sequence.
        self.round = 0
        self.pass_no = 0
        self.admitted_at: list[tuple[int, int, tuple[int, float, str], int]] = []
        self.preempted_at: list[tuple[int, int, tuple[int, float, str], int]] = []
        self.waiting: dict[str, Wait] = {}
        self.behind: dict[str, list[Entry]] = {}  # StrictFIFO head -> the runs it blocks
        self.flavor_cache: dict[tuple[str, str | None], tuple[str, ...]] = {}
        self.no_room_text: dict[tuple[str, tuple[str, ...], Demand], str] = {}
        self.admitted_ids: set[str] = set()
        # Evicting workloads kept for the pending preemptor that chose them.
        self.claims: dict[str, list[tuple[Admitted, Demand]]] = {}
        self.kept_for: dict[str, str] = {}
        evicting_for = [a for a in snap.admitted if a.evicting and a.preempted_by is not None]
        by_id = {w.id: w for w in snap.pending} if evicting_for else {}
        for a in evicting_for:
            if a.preempted_by in by_id:
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
            if users is None:
                self.users.count(w)
        # The future book starts where the call that chose those victims left it: each
        # claimed victim gone, its preemptor's demand (and user slot) held in its place.
        # Applied only when the preemptor's turn came, the runs before it in the order
        # would see the victims still there and the room unreserved, and could take room
        # a preemptor counts on, which then has to choose new victims.
        self.held: dict[str, str] = {}  # preemptor -> the flavor held for it until its turn
        for pid, claimed in self.claims.items():
            w = by_id[pid]
            self.held[pid] = claimed[0][0].flavor
            self._hold(w, claimed, demand_of(w), claimed[0][0].flavor, 1)

    # -- the two passes -----------------------------------------------------------------
    def run(self) -> Decisions:
        entries = self._entries()
        self.decide(entries)
        # Positions among the runs still waiting once this cycle's admissions are applied.
        waiting = self.waiting
        left = [e for e in entries if e.w.id in waiting]
        totals: dict[str, int] = {}
        position: dict[str, int] = {}
        for e in left:
            q = e.w.cluster_queue
            totals[q] = position[e.w.id] = totals.get(q, 0) + 1
        pending = {
            e.w.id: self.explain(e.w.id, position[e.w.id], totals[e.w.cluster_queue]) for e in left
        }
        return Decisions(tuple(self.admissions), tuple(self.preemptions), pending)

    def decide(self, entries: list[Entry]) -> None:
        """Admit, preempt or leave waiting each of ``entries`` (in ``queue_order``)."""
        todo = entries
        while todo:
            self.round += 1
            blocked = self._passes(todo)
            # A StrictFIFO head waiting for quota may have reached its user's limit since
            # (another run of that user was admitted later in the cycle). Held back by that
            # limit it blocks nobody, so the runs behind it get their turn: what the next
            # cycle would do anyway.
            todo = []
            for head in blocked.values():
                quota = self.wait_of(head.w.id)[1] == "WaitingForQuota"
                held = self.users.blocked(head.w) if quota else None
                if held is not None:
                    self._wait(head, "UserLimit", held, result=SKIPPED)
                    todo += self.behind.pop(head.w.id, [])
            todo.sort(key=lambda e: queue_order(e.w))

    def _passes(self, entries: list[Entry]) -> dict[str, Entry]:
        blocked: dict[str, Entry] = {}
        stopped: set[str] = set()
        deferred: list[Entry] = []
        self.pass_no = 1
        for e in entries:
            q = e.w.cluster_queue
            if q in blocked:
                self._block(e, blocked[q])
            elif q in stopped:
                deferred.append(e)
            else:
                result = self._step(e, borrow=False)
                if result == DEFERRED:
                    stopped.add(q)
                    deferred.append(e)
                elif result in (WAITING, FAILED) and self._strict(q):
                    blocked[q] = e
        self.pass_no = 2
        for e in deferred:
            q = e.w.cluster_queue
            if q in blocked:
                self._block(e, blocked[q])
            elif self._step(e, borrow=True) in (WAITING, FAILED) and self._strict(q):
                blocked[q] = e
        return blocked

    def _strict(self, q: str) -> bool:
        return self.snap.queues[q].strategy == "StrictFIFO"

    def _entries(self) -> list[Entry]:
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
            out.append(Entry(w, demand, dense, fl))
        return out

    def _flavors(self, w: Workload) -> tuple[str, ...]:
        key = (w.cluster_queue, w.gpu_type)
        found = self.flavor_cache.get(key)
        if found is None:
            cq = self.snap.queues.get(w.cluster_queue)
            found = () if cq is None else flavors_for(cq, w.gpu_type, self.snap)
            self.flavor_cache[key] = found
        return found

    def _hold(
        self, w: Workload, claimed: list[tuple[Admitted, Demand]], d: Demand, flavor: str, sign: int
    ) -> None:
        """Apply (``sign`` 1) or take back (-1) what a standing claim means for the books."""
        for a, vd in claimed:
            self.future.add(a.workload.cluster_queue, a.flavor, vd, -sign)
            self._changed(a.workload.cluster_queue)
        q = w.cluster_queue
        self.future.add(q, flavor, d, sign)
        self._changed(q)
        self.users.count(w, sign)
        holders = self.reserved_by.setdefault((self.model.scope(q), flavor), [])
        if sign > 0:
            holders.append(w.id)
        else:
            holders.remove(w.id)

    # -- one workload ---------------------------------------------------------------------
    def _step(self, e: Entry, *, borrow: bool) -> int:
        w, d = e.w, e.demand
        q = w.cluster_queue
        flavor = self.held.pop(w.id, None)
        if flavor is not None:  # its turn: decide again from the books as they really are
            self._hold(w, self.claims[w.id], d, flavor, -1)
        if not e.flavors or not self._could_ever_fit(e):
            never = never_fits_reason(w, self.snap, self.model)
            if never is not None:
                return self._wait(e, never[0], never[1], result=SKIPPED)
        held = self.users.blocked(w)
        if held is not None:
            # A per-user limit says nothing about the queue's capacity: if the run held back
            # blocked a StrictFIFO queue, one user at their limit would stall every other
            # user of the queue, which is what the limit exists to prevent. So it is skipped.
            return self._wait(e, "UserLimit", held, result=SKIPPED)
        g, c, m = e.dense
        for f in e.flavors:
            cg, cc, cm = self._room(q, f)
            if (g <= cg or not g) and (c <= cc or not c) and (m <= cm or not m):
                if not borrow and (self.now.borrows(q, f, d) or self.future.borrows(q, f, d)):
                    return DEFERRED
                self._admit(e, f)
                return ADMITTED
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
                    result=WAITING,
                )
        return self._wait(e, "WaitingForQuota", result=FAILED)

    def _failed_before(self, memo: _Memo, e: Entry, flavor: str) -> bool:
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

    def _remember_failure(self, memo: _Memo, e: Entry, flavor: str) -> None:
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

    def _could_ever_fit(self, e: Entry) -> bool:
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

    def _admit(self, e: Entry, flavor: str) -> None:
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
        self.admitted_at.append((self.round, self.pass_no, queue_order(w), 0))
        self.waiting.pop(w.id, None)

    def _reserve(self, w: Workload, d: Demand, flavor: str) -> None:
        q = w.cluster_queue
        self.future.add(q, flavor, d)
        self._changed(q)
        self.users.count(w)  # its user's slot is held for it too
        self.reserved_by.setdefault((self.model.scope(q), flavor), []).append(w.id)

    def _preempt(self, e: Entry, flavor: str, victims: list[Victim]) -> None:
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
            self.preempted_at.append(
                (self.round, self.pass_no, queue_order(w), len(self.preempted_at))
            )

    def _wait(self, e: Entry, reason: str, *detail: str, result: int) -> int:
        self.waiting[e.w.id] = (e, reason, detail)
        return result

    def _block(self, e: Entry, head: Entry) -> None:
        self.behind.setdefault(head.w.id, []).append(e)
        self._wait(e, "BlockedByHead", head.w.id, self.wait_of(head.w.id)[1], result=FAILED)

    def wait_of(self, workload_id: str) -> Wait:
        """What this call said about a run it left waiting."""
        return self.waiting[workload_id]

    # -- sentences ------------------------------------------------------------------------
    def explain(self, workload_id: str, position: int, total: int) -> Pending:
        """The pending explanation of a run left waiting, from the books as this call
        left them (so the numbers include its admissions)."""
        e, reason, detail = self.wait_of(workload_id)
        w, q = e.w, e.w.cluster_queue
        if reason == "WaitingForQuota":
            key = (q, e.flavors, e.demand)
            text = self.no_room_text.get(key)
            if text is None:
                text = no_room(
                    w, e.demand, e.flavors, self.now, self.future, self.runs, self.reserved_by
                )
                self.no_room_text[key] = text
        elif reason == "WaitingForPreemptedWorkloads":
            n_fresh = int(detail[1])
            fresh, stopping = detail[2 : 2 + n_fresh], detail[2 + n_fresh :]
            text = preempting(q, detail[0], e.demand, fresh, stopping)
        elif reason == "BlockedByHead":
            text = (
                f"queue {q} is StrictFIFO and its head {detail[0]} cannot start yet"
                f" ({detail[1]}); nothing behind the head is admitted before it"
            )
        else:
            text = detail[0]
        text += f"; position {position} of {total} in queue {q}"
        return Pending(w.id, q, position, reason, text)
