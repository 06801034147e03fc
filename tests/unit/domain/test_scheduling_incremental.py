"""The incremental scheduler decides exactly what the full recomputation decides.

``Scheduler.decide`` keeps state between passes (entries, parts of the cluster it decided
before, classes of runs that waited for quota); ``schedule`` starts from nothing. Over
random sequences of what happens to a server between passes, both must return the same
admissions in the same order, the same preemptions and the same explanation for every run
left waiting.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_scheduling_properties import apply, queues
from test_scheduling_support import cq, fq, snap, wl

from taugrid.domain.quota import Admitted, ClusterQueue, Flavor, Snapshot, UserLimit, Workload
from taugrid.domain.scheduling import Decisions, schedule
from taugrid.domain.scheduling_state import Scheduler

OPS = ("arrive", "arrive", "arrive", "cancel", "finish", "apply", "apply", "stop", "evict")
OPS += ("policy", "limits", "same", "burst")


class World:
    """What the server holds between passes, changed the way the server changes it."""

    def __init__(self, qs: list[ClusterQueue], flavors: list[Flavor]) -> None:
        self.queues = {q.name: q for q in qs}
        self.flavors = {f.name: f for f in flavors}
        for q in qs:
            for f in q.flavors:
                self.flavors.setdefault(f.flavor, Flavor(f.flavor))
        self.limits: dict[str, UserLimit] = {}
        self.admitted: list[Admitted] = []
        self.pending: list[Workload] = []
        self.seq = 0
        self.last: Decisions | None = None

    def snapshot(self) -> Snapshot:
        return Snapshot(
            self.queues, self.flavors, tuple(self.admitted), tuple(self.pending), self.limits
        )


@st.composite
def workload(draw: st.DrawFn, world: World) -> Workload:
    world.seq += 1
    # Now and then a queue the policy does not have (left it in a policy change).
    queue = draw(st.sampled_from(sorted(world.queues))) if draw(st.integers(0, 9)) else "gone"
    return wl(
        f"w{world.seq}",
        queue,
        gpu=draw(st.integers(0, 5)),
        cpu=draw(st.sampled_from([0, 0, 1000, 3000])),
        prio=draw(st.integers(0, 3)),
        at=float(draw(st.integers(0, 20))),
        user=draw(st.sampled_from(["ann", "bob", "cy"])),
        ws=draw(st.sampled_from(["ws", "ws", "other"])),
        gpu_type=draw(st.sampled_from([None, None, "h100"])),
    )


def step(world: World, op: str, data: st.DataObject) -> None:
    pick = data.draw
    if op == "arrive":
        world.pending.append(pick(workload(world)))
    elif op == "burst":  # many at once (the scheduler sorts once instead of inserting each)
        world.pending += [pick(workload(world)) for _ in range(pick(st.integers(30, 80)))]
    elif op == "cancel" and world.pending:
        world.pending.pop(pick(st.integers(0, len(world.pending) - 1)))
    elif op == "finish" and world.admitted:
        world.admitted.pop(pick(st.integers(0, len(world.admitted) - 1)))
    elif op == "apply" and world.last is not None:
        s = apply(world.snapshot(), world.last)
        world.admitted, world.pending = list(s.admitted), list(s.pending)
        world.last = None
    elif op == "stop":  # victims stopped: back in the queue, keeping their submit time
        gone = [a for a in world.admitted if a.evicting]
        world.admitted = [a for a in world.admitted if not a.evicting]
        world.pending += [a.workload for a in gone]
    elif op == "evict" and world.admitted:  # a cancel of a running run: evicting, no claim
        i = pick(st.integers(0, len(world.admitted) - 1))
        world.admitted[i] = replace(world.admitted[i], evicting=True)
    elif op == "policy":
        world.queues = {q.name: q for q in pick(queues())}
        for q in world.queues.values():
            for f in q.flavors:
                world.flavors.setdefault(f.flavor, Flavor(f.flavor))
    elif op == "limits":
        world.limits = (
            {
                "ws": UserLimit(
                    pick(st.none() | st.integers(1, 3)), pick(st.none() | st.integers(2, 8))
                )
            }
            if pick(st.booleans())
            else {}
        )
    elif op == "same":  # the same policy, as new objects: compared by value, not identity
        world.queues = dict(world.queues)
        world.limits = dict(world.limits)


def assert_same(inc: Decisions, full: Decisions) -> None:
    assert inc.admissions == full.admissions
    assert inc.preemptions == full.preemptions
    assert set(inc.pending) == set(full.pending)
    assert len(inc.pending) == len(full.pending)
    for wid, p in full.pending.items():
        assert inc.pending[wid] == p, wid


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(queues(), st.sampled_from([None, "h100"]), st.data())
def test_the_incremental_scheduler_decides_what_the_full_recomputation_decides(
    qs: list[ClusterQueue], f1_type: str | None, data: st.DataObject
) -> None:
    world = World(qs, [Flavor("f1", f1_type), Flavor("f2")])
    scheduler = Scheduler()
    for op in data.draw(st.lists(st.sampled_from(OPS), min_size=1, max_size=20)):
        step(world, op, data)
        s = world.snapshot()
        inc, full = scheduler.decide(s), schedule(s)
        assert_same(inc, full)
        world.last = full


def test_a_pass_with_nothing_changed_keeps_every_part() -> None:
    q1 = cq("a", fq("f", gpu=2), cohort="c1")
    q2 = cq("b", fq("f", gpu=2), cohort="c2")
    pending = [wl("w1", "a", gpu=4), wl("w2", "b", gpu=1), wl("w3", "b", gpu=2, at=1)]
    s = snap([q1, q2], [], pending)
    scheduler = Scheduler()
    first = scheduler.decide(s)
    again = scheduler.decide(replace(s, pending=tuple(pending)))
    assert_same(again, schedule(s))
    assert again.admissions == first.admissions  # not applied: decided again, the same way
    assert again.pending["w1"].reason == "ExceedsMaxQuota"


def test_odd_snapshots_go_to_the_full_recomputation() -> None:
    q = cq("a", fq("f", gpu=2))
    w = wl("w1", "a", gpu=1)
    for s in (
        snap([q], [], [w, w]),  # one run twice
        snap([q], [Admitted(w, "f")], [w]),  # waiting and admitted at once
    ):
        assert_same(Scheduler().decide(s), schedule(s))


@st.composite
def crowded(draw: st.DrawFn) -> Snapshot:
    """Many runs of few classes: the incremental scheduler's shortcuts (one step per class,
    kept across changes in other flavors) are taken often."""
    qs = draw(queues())
    names = [q.name for q in qs]
    limits = (
        {"ws": UserLimit(draw(st.none() | st.integers(2, 6)), None)} if draw(st.booleans()) else {}
    )
    flavors = [Flavor("f1", draw(st.sampled_from([None, "h100"]))), Flavor("f2")]

    def runs(prefix: str, most: int) -> list[Workload]:
        return [
            wl(
                f"{prefix}{i}",
                draw(st.sampled_from(names)),
                gpu=draw(st.integers(1, 2)),
                cpu=draw(st.sampled_from([0, 1000])),
                prio=draw(st.integers(0, 1)),
                at=float(draw(st.integers(0, 5))),
                user=draw(st.sampled_from(["ann", "bob"])),
                gpu_type=draw(st.sampled_from([None, "h100"])),
            )
            for i in range(draw(st.integers(0, most)))
        ]

    first = snap(qs, [], runs("old", 15), flavors=flavors, limits=limits)
    admitted = list(apply(first, schedule(first)).admitted)
    evict = draw(st.lists(st.booleans(), min_size=len(admitted), max_size=len(admitted)))
    admitted = [replace(a, evicting=e) for a, e in zip(admitted, evict, strict=True)]
    return snap(qs, admitted, runs("new", 60), flavors=flavors, limits=limits)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(crowded())
def test_the_shortcuts_decide_what_the_steps_decide(s: Snapshot) -> None:
    full = schedule(s)
    assert_same(Scheduler().decide(s), full)
    half = Scheduler()
    half.decide(replace(s, pending=s.pending[::2]))
    assert_same(half.decide(s), full)
