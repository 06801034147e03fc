"""One independent part of the cluster, decided by the incremental scheduler. Pure.

A part is a set of scopes (cohorts, or queues without one) that share nothing with the rest:
no quota, no limited user, no claim. ``PartCycle`` is the reference ``Cycle`` with one
shortcut, and ``Part`` is what a pass keeps of it: its decisions, tagged with where in one
whole call they would have been made, and the books its explanations are written from
when someone reads them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from taugrid.domain.quota import Snapshot
from taugrid.domain.scheduling_cycle import (
    DEFERRED,
    FAILED,
    SKIPPED,
    WAITING,
    Cycle,
    Entry,
    Wait,
)
from taugrid.domain.scheduling_limits import UserBook
from taugrid.domain.scheduling_quota import QuotaModel
from taugrid.domain.scheduling_types import Admission, Pending, Preemption

Scope = tuple[str, str]
Order = tuple[int, int, tuple[int, float, str], int]
_QUOTA = "WaitingForQuota"


class PartCycle(Cycle):
    """``Cycle`` over pre-built, pre-sorted entries, skipping the step of a run that must
    wait for quota because one of its class just did.

    A class is a queue, the flavors that may serve the run and its request. An entry's step
    repeats the step of an earlier entry of its class when nothing in their cohort changed
    since (``version``): the same room in both books, and the memo of failed victim
    searches (which a step consults before it searches) answering it as it answered the
    earlier one, so the search is not run either; no side effects. The per-user limit,
    checked first in a step, is checked here too; a run with a claim on evicting runs
    always takes its own step. A run the shortcut leaves waiting for quota is not even
    recorded: every entry neither admitted nor recorded waits for quota (``wait_of``)."""

    def __init__(self, snap: Snapshot, *, model: QuotaModel, users: UserBook) -> None:
        super().__init__(snap, model=model, users=users)
        self.fails: dict[int, int] = {}  # class -> cohort version it waited for quota at
        self.strict = {q for q, cq in snap.queues.items() if cq.strategy == "StrictFIFO"}
        self.by_id: dict[str, Entry] | None = None

    def wait_of(self, workload_id: str) -> Wait:
        found = self.waiting.get(workload_id)
        if found is not None:
            return found
        if self.by_id is None:
            self.by_id = {e.wid: e for e in self.entries}
        return (self.by_id[workload_id], _QUOTA, ())

    def decide(self, entries: list[Entry]) -> None:
        self.entries = entries
        super().decide(entries)

    def _passes(self, entries: list[Entry]) -> dict[str, Entry]:
        blocked: dict[str, Entry] = {}
        stopped: set[str] = set()
        deferred: list[Entry] = []
        fails, version, claims, strict = self.fails, self.version, self.claims, self.strict
        self.pass_no = 1
        for e in entries:
            q = e.q
            if q in blocked:
                self._block(e, blocked[q])
                continue
            if q in stopped:
                deferred.append(e)
                continue
            if fails.get(e.cls) == version.get(e.scope, 0) and e.wid not in claims:
                result = self._shortcut(e)
            else:
                result = self._stepped(e, borrow=False)
            if result == DEFERRED:
                stopped.add(q)
                deferred.append(e)
            elif result in (WAITING, FAILED) and q in strict:
                blocked[q] = e
        self.pass_no = 2
        for e in deferred:
            q = e.q
            if q in blocked:
                self._block(e, blocked[q])
                continue
            if fails.get(e.cls) == version.get(e.scope, 0) and e.wid not in claims:
                result = self._shortcut(e)
            else:
                result = self._stepped(e, borrow=True)
            if result in (WAITING, FAILED) and q in strict:
                blocked[q] = e
        return blocked

    def _shortcut(self, e: Entry) -> int:
        """The step of a run whose class waited for quota at this very version."""
        if self.round > 1:  # blocked by a head in the round before
            self.waiting.pop(e.wid, None)
        if not e.plain:  # the per-user limit comes first in a step
            held = self.users.blocked(e.w)
            if held is not None:
                return self._wait(e, "UserLimit", held, result=SKIPPED)
        return FAILED

    def _stepped(self, e: Entry, *, borrow: bool) -> int:
        result = self._step(e, borrow=borrow)
        if result == FAILED:
            if e.wid not in self.claims:
                self.fails[e.cls] = self.version.get(e.scope, 0)
            if self.waiting.get(e.wid, (e, "", ()))[1] == _QUOTA:
                del self.waiting[e.wid]  # implicit, like the shortcut's
        return result


class Part:
    """What one pass decided for a part: kept as is while the part does not change."""

    def __init__(self, cycle: PartCycle, entries: Sequence[Entry]) -> None:
        self.cycle = cycle
        self.entries = entries
        self.admissions = list(zip(cycle.admitted_at, cycle.admissions, strict=True))
        self.preemptions = list(zip(cycle.preempted_at, cycle.preemptions, strict=True))
        self.admitted = {a.workload_id for a in cycle.admissions}
        self._positions: dict[str, tuple[int, int]] | None = None
        self._explained: dict[str, Pending] = {}

    def waiting(self) -> Iterator[str]:
        admitted = self.admitted
        return (e.wid for e in self.entries if e.wid not in admitted)

    def count(self) -> int:
        return len(self.entries) - len(self.admitted)

    def explain(self, workload_id: str) -> Pending:
        found = self._explained.get(workload_id)
        if found is None:
            position, total = self._positions_of()[workload_id]
            found = self.cycle.explain(workload_id, position, total)
            self._explained[workload_id] = found
        return found

    def _positions_of(self) -> dict[str, tuple[int, int]]:
        """Position and count per queue of the runs left waiting, in queue order."""
        if self._positions is None:
            admitted = self.admitted
            counts: dict[str, int] = {}
            at: dict[str, tuple[str, int]] = {}
            for e in self.entries:
                if e.wid not in admitted:
                    n = counts[e.q] = counts.get(e.q, 0) + 1
                    at[e.wid] = (e.q, n)
            self._positions = {wid: (n, counts[q]) for wid, (q, n) in at.items()}
        return self._positions


class Explanations(Mapping[str, Pending]):
    """The pending explanation of every run left waiting, each written when first read."""

    def __init__(self, parts: Sequence[Part]) -> None:
        self._parts = parts
        self._where: dict[str, Part] | None = None

    def _index(self) -> dict[str, Part]:
        if self._where is None:
            self._where = {wid: part for part in self._parts for wid in part.waiting()}
        return self._where

    def __getitem__(self, workload_id: str) -> Pending:
        return self._index()[workload_id].explain(workload_id)

    def __contains__(self, workload_id: object) -> bool:
        return workload_id in self._index()

    def __iter__(self) -> Iterator[str]:
        return iter(self._index())

    def __len__(self) -> int:
        return sum(part.count() for part in self._parts)


def merged(parts: Sequence[Part]) -> tuple[tuple[Admission, ...], tuple[Preemption, ...]]:
    """The parts' decisions in the order a single call over all of them makes them."""
    admissions = [x for part in parts for x in part.admissions]
    preemptions = [x for part in parts for x in part.preemptions]
    admissions.sort(key=_first)
    preemptions.sort(key=_first)
    return tuple(a for _, a in admissions), tuple(p for _, p in preemptions)


def _first(pair: tuple[Order, object]) -> Order:
    return pair[0]
