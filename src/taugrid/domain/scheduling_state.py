"""The scheduler's state between passes, so that a pass costs what changed. Pure.

``Scheduler.decide(snapshot)`` returns exactly what ``schedule(snapshot)`` returns (a
property test checks it over random sequences of arrivals, departures, admissions,
evictions and policy changes, explanations included). It only avoids work whose result
it already has:

- Entries (a run's demand, the flavors that may serve it, its place in Kueue's order) are
  built once per run and policy and kept sorted per scope, a cohort or a queue without
  one (``scheduling_index``): no pass sorts the backlog. A run is found unchanged by
  identity (the server keeps its objects while its row is unchanged).
- The cluster falls apart into independent parts: scopes share nothing but a user under
  a per-user limit (whose runs in two cohorts couple them) and claims (a preemptor
  waiting for its victims). A part whose waiting runs, admitted runs and limited users
  are the same as at the last pass decides what it decided then, so those decisions are
  kept: Kueue's inadmissible workloads, set aside until quota or the policy changes, per
  part. Usage of admitted runs is counted for the parts being decided only.
- In a part that did change, a run waits for quota without a step of its own when one of
  its class (queue, flavors, request) just did and nothing in their cohort changed since
  (Kueue looks at one head per queue; this steps one run per class: ``PartCycle``).
- Explanations are written when read (``Explanations``): a pass writes none of the
  15,000 sentences; ``tau status`` reads the few runs it shows.

Decisions of parts decided apart are merged into the order one call makes them in.
A snapshot the server never builds (an id twice, a run both waiting and admitted) goes to
the full recomputation, and the state starts afresh.
"""

from __future__ import annotations

from operator import attrgetter

from taugrid.domain.quota import Admitted, Snapshot
from taugrid.domain.scheduling_cycle import Cycle, Entry
from taugrid.domain.scheduling_index import Index, Scope, User
from taugrid.domain.scheduling_limits import UserBook
from taugrid.domain.scheduling_part import Explanations, Part, PartCycle, merged
from taugrid.domain.scheduling_quota import QuotaModel
from taugrid.domain.scheduling_types import Decisions

_KEY = attrgetter("key")


class _Odd(Exception):
    """The snapshot has an id twice, or a run both waiting and admitted."""


class Scheduler:
    """What the engine keeps between scheduling passes. One thread decides; the
    ``Decisions`` it returns may be read from any thread."""

    def __init__(self) -> None:
        self._start(None)

    def _start(self, snap: Snapshot | None) -> None:
        """Forget everything but ``snap``'s policy (None: no policy yet)."""
        policy = snap if snap is not None else Snapshot({}, {}, (), ())
        queues, flavors, limits = policy.queues, policy.flavors, policy.user_limits
        self._policy: tuple[object, object, object] | None = (
            (queues, flavors, limits) if snap is not None else None
        )
        self._model = QuotaModel(queues)
        self._index = Index(Snapshot(queues, flavors, (), (), limits), self._model)
        self._admitted: dict[str, Admitted] = {}
        self._users = UserBook(limits)  # admitted runs of limited users, kept up to date
        self._claims: dict[str, set[Scope]] = {}  # preemptor -> scopes of its victims
        self._parts: dict[frozenset[Scope], Part] = {}
        self._pass = 0

    # -- a pass -------------------------------------------------------------------------
    def decide(self, snap: Snapshot) -> Decisions:
        if self._policy is None or not self._same_policy(snap):
            self._start(snap)  # a policy change: every entry, class and part is rebuilt
        dirty: set[Scope] = set()
        users: set[User] = set()
        try:
            admitted = {a.workload.id: a for a in snap.admitted}
            if len(admitted) != len(snap.admitted):
                raise _Odd
            gone = self._follow_pending(snap, admitted, dirty, users)
        except _Odd:
            self._start(None)
            return Cycle(snap).run()
        changed = self._follow_admitted(admitted, gone, dirty, users)
        changed.update(gone)
        claims = self._claims_of(snap.admitted)
        for wid in changed:
            dirty.update(self._claims.get(wid, ()))
            dirty.update(claims.get(wid, ()))
        self._claims = claims
        for user in users:
            dirty.update(self._index.user_scopes.get(user, ()))
        parts: dict[frozenset[Scope], Part] = {}
        for scopes in self._components():
            part = self._parts.get(scopes)
            if part is None or not scopes.isdisjoint(dirty):
                part = self._decide_part(snap, scopes)
            parts[scopes] = part
        self._parts = parts
        self._admitted = admitted
        chosen = list(parts.values())
        admissions, preemptions = merged(chosen)
        return Decisions(admissions, preemptions, Explanations(chosen))

    def _decide_part(self, snap: Snapshot, scopes: frozenset[Scope]) -> Part:
        index = self._index
        if len(scopes) == 1:
            (only,) = scopes
            entries = list(index.scoped.get(only, ()))
        else:  # runs of sorted lists: timsort merges them
            entries = sorted((e for s in scopes for e in index.scoped.get(s, ())), key=_KEY)
        scope = self._model.scope
        admitted = tuple(a for a in snap.admitted if scope(a.workload.cluster_queue) in scopes)
        # The cycle reads the waiting runs from the entries; of the snapshot's, it needs
        # only the preemptors whose victims are stopping.
        preemptors = tuple(
            index.entries[a.preempted_by].w
            for a in admitted
            if a.evicting and a.preempted_by in index.entries
        )
        part_snap = Snapshot(snap.queues, snap.flavors, admitted, preemptors, snap.user_limits)
        cycle = PartCycle(part_snap, model=self._model, users=self._users.copy())
        cycle.decide(entries)
        return Part(cycle, entries)

    # -- what changed -------------------------------------------------------------------
    def _same_policy(self, snap: Snapshot) -> bool:
        assert self._policy is not None
        queues, flavors, limits = self._policy
        same = (
            (snap.queues is queues or snap.queues == queues)
            and (snap.flavors is flavors or snap.flavors == flavors)
            and (snap.user_limits is limits or snap.user_limits == limits)
        )
        if same:  # keep the newest objects, so the next pass compares by identity
            self._policy = (snap.queues, snap.flavors, snap.user_limits)
        return same

    def _follow_pending(
        self,
        snap: Snapshot,
        admitted: dict[str, Admitted],
        dirty: set[Scope],
        users: set[User],
    ) -> dict[str, Entry]:
        """Entries for runs that arrived, changed or left; the entries that left."""
        index = self._index
        entries = index.entries
        gone: dict[str, Entry] = {}
        self._pass += 1
        now = self._pass
        for w in snap.pending:
            e = entries.get(w.id)
            if e is not None:
                if e.seen == now:
                    raise _Odd
                if e.w is w or e.w == w:
                    e.w = w  # the same run, maybe as a new object: identity next time
                    e.seen = now
                    continue
                index.drop(e, dirty, users)
                gone[e.wid] = e
            index.add(w, dirty, users).seen = now
        for wid in admitted:  # most runs that left were admitted
            e = entries.get(wid)
            if e is not None:
                if e.seen == now:  # waiting and admitted at once
                    raise _Odd
                index.drop(e, dirty, users)
                gone[wid] = e
        if len(entries) != len(snap.pending):  # cancelled
            for e in [e for e in entries.values() if e.seen != now]:
                index.drop(e, dirty, users)
                gone[e.wid] = e
        index.settle()
        return gone

    def _follow_admitted(
        self,
        admitted: dict[str, Admitted],
        gone: dict[str, Entry],
        dirty: set[Scope],
        users: set[User],
    ) -> set[str]:
        old = self._admitted
        changed: set[str] = set()
        arrived = 0
        for wid, a in admitted.items():
            before = old.get(wid)
            if before is a:
                continue
            if before is None:
                arrived += 1
            elif before == a:
                continue
            else:
                self._admitted_changed(before, -1, gone, dirty, users)
            self._admitted_changed(a, 1, gone, dirty, users)
            changed.add(wid)
        if len(old) + arrived != len(admitted):
            for wid in old.keys() - admitted.keys():
                self._admitted_changed(old[wid], -1, gone, dirty, users)
                changed.add(wid)
        return changed

    def _admitted_changed(
        self,
        a: Admitted,
        sign: int,
        gone: dict[str, Entry],
        dirty: set[Scope],
        users: set[User],
    ) -> None:
        w = a.workload
        dirty.add(self._model.scope(w.cluster_queue))
        if w.workspace in self._users.limits:
            self._users.count(w, sign)
            users.add((w.workspace, w.user))
        if a.preempted_by is not None:  # its claim starts, ends or changes
            preemptor = self._index.entries.get(a.preempted_by) or gone.get(a.preempted_by)
            if preemptor is not None:
                dirty.add(preemptor.scope)

    def _claims_of(self, admitted: tuple[Admitted, ...]) -> dict[str, set[Scope]]:
        """Per preemptor still waiting, the scopes of the runs evicting for it."""
        entries = self._index.entries
        scope = self._model.scope
        out: dict[str, set[Scope]] = {}
        for a in admitted:
            if a.evicting and a.preempted_by is not None and a.preempted_by in entries:
                out.setdefault(a.preempted_by, set()).add(scope(a.workload.cluster_queue))
        return out

    # -- independent parts --------------------------------------------------------------
    def _components(self) -> list[frozenset[Scope]]:
        """Scopes with waiting runs, grouped by what couples them: a limited user waiting
        in several, or a preemptor and the scopes of its victims."""
        parent: dict[Scope, Scope] = {s: s for s in self._index.scoped}

        def root(s: Scope) -> Scope:
            while parent[s] != s:
                parent[s] = parent[parent[s]]
                s = parent[s]
            return s

        def join(a: Scope, b: Scope) -> None:
            parent.setdefault(a, a)
            parent.setdefault(b, b)
            ra, rb = root(a), root(b)
            if ra != rb:
                parent[rb] = ra

        for per in self._index.user_scopes.values():
            if len(per) > 1:
                first, *rest = per
                for s in rest:
                    join(first, s)
        for pid, scopes in self._claims.items():
            mine = self._index.entries[pid].scope
            for s in scopes:
                join(mine, s)
        groups: dict[Scope, set[Scope]] = {}
        for s in parent:
            groups.setdefault(root(s), set()).add(s)
        return [frozenset(g) for g in groups.values()]
