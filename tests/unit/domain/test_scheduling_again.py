"""Scheduling the server's own output again: what the next pass may and may not change.

Counter-examples Hypothesis found for ``test_scheduling_its_own_output_admits_nothing_new``
(tests/unit/domain/test_scheduling_properties.py), kept as explicit cases.
"""

from __future__ import annotations

from test_scheduling_properties import apply
from test_scheduling_support import adm, cq, fq, snap, wl

from taugrid.domain.quota import Admitted, Flavor
from taugrid.domain.scheduling import schedule


def test_a_run_admitted_by_borrowing_is_reclaimed_by_the_lender_on_the_next_pass() -> None:
    """Kueue's semantics, not a bug: one call cannot preempt what it admits itself (in
    Kueue a workload admitted in a cycle is no candidate in that cycle either); the next
    call reclaims it, as Kueue's next cycle does (reclaimWithinCohort: a queue below its
    nominal quota takes back what it lent)."""
    qs = [
        cq("lend", fq("f", gpu=2), cohort="c", reclaim="Any"),
        cq("other", fq("f", gpu=1), cohort="c"),
        cq("borrow", fq("f", gpu=0), cohort="c"),
    ]
    # "b" heads queue lend and must borrow, so "c" (within lend's nominal quota) comes
    # after the borrower "a", which takes the cohort's 3 GPUs in the same call.
    s = snap(
        qs, [], [wl("a", "borrow", gpu=3), wl("b", "lend", gpu=3), wl("c", "lend", gpu=1, at=1)]
    )
    first = schedule(s)
    assert [(x.workload_id, x.borrowed) for x in first.admissions] == [("a", {"gpu": 3})]
    assert first.pending["c"].reason == "WaitingForQuota"
    assert first.preemptions == ()
    again = schedule(apply(s, first))
    assert again.admissions == ()
    assert [(p.victim_id, p.preemptor_id, p.reason) for p in again.preemptions] == [
        ("a", "c", "InCohortReclamation")
    ]
    assert again.pending["c"].reason == "WaitingForPreemptedWorkloads"
    assert again.pending["b"].reason == "WaitingForQuota"  # it would borrow: no reclaiming


def test_a_preemptor_keeps_the_room_it_chose_victims_for() -> None:
    """The bug: the next call applied each claim only at its preemptor's turn, so new1
    (first in the order) saw new8's victim old3 still there, found the room it was promised
    short, and chose new0, admitted by the first call into room that counted on both claims.
    The next call now starts from the books the first one left: claimed victims gone,
    their preemptors' demand held."""
    qs = [
        cq("q0", fq("f", gpu=2), cohort="c", within="LowerPriority"),
        cq("q1", fq("f", gpu=4), cohort="c", reclaim="LowerPriority"),
        cq("q2", fq("f", gpu=0), cohort="c"),
    ]
    admitted = [adm(wl("old4", "q0", gpu=1), "f"), adm(wl("old3", "q2", gpu=3), "f")]
    pending = [
        wl("new0", "q0", gpu=1),
        wl("new1", "q0", gpu=3, prio=1),
        wl("new8", "q1", gpu=1, prio=1),
    ]
    s = snap(qs, admitted, pending)
    first = schedule(s)
    assert [x.workload_id for x in first.admissions] == ["new0"]
    assert [(p.victim_id, p.preemptor_id, p.reason) for p in first.preemptions] == [
        ("old4", "new1", "InClusterQueue"),
        ("old3", "new8", "InCohortReclamation"),
    ]
    again = schedule(apply(s, first))
    assert again.admissions == ()
    assert again.preemptions == ()  # was: new0 preempted by new1
    for preemptor in ("new1", "new8"):
        assert again.pending[preemptor].reason == "WaitingForPreemptedWorkloads"


def test_room_held_for_a_preemptor_stays_held_when_its_queue_moves_up_a_pass() -> None:
    """The same bug seen as an admission: new6 waits behind the borrowing head new7, so the
    first call looks at it after new1 claimed old2, and it holds CPU that the stopping old6
    will free; new5 must wait. The next call (new7 admitted) looks at new6 first: with
    claims applied only at new1's turn it found no room, held nothing, and new5 took it."""
    qs = [
        cq(
            "q0",
            fq("f2", gpu=(0, 4, None), cpu=6000),
            fq("f1", gpu=(6, None, 1), cpu=3000),
            cohort="c1",
            strict=True,
            reclaim="Any",
        ),
        cq("q2", fq("f2", gpu=(6, None, 6)), cohort="c1", reclaim="Any"),
        cq(
            "q4",
            fq("f1", gpu=(4, 0, None)),
            fq("f2", gpu=(0, 3, None), cpu=1000),
            cohort="c1",
            reclaim="LowerPriority",
        ),
    ]
    h100 = [Flavor("f1", "h100"), Flavor("f2")]
    admitted = [
        Admitted(wl("old7", "q0", gpu=4, cpu=1000, prio=3, gpu_type="h100"), "f1", 1.0),
        Admitted(wl("old6", "q0", cpu=3000, prio=2, at=5, user="bob"), "f2", 1.0, evicting=True),
        Admitted(wl("old5", "q4", cpu=1000, at=16), "f2", 1.0),
        Admitted(wl("old2", "q0", gpu=4, cpu=1000, prio=1, at=5, user="bob"), "f2", 1.0),
    ]
    pending = [
        wl("new1", "q2", gpu=3, prio=1, at=7, user="cy"),
        wl("new5", "q4", cpu=1000, at=16),
        wl("new6", "q0", cpu=3000, prio=2, at=5, user="bob"),
        wl("new7", "q0", gpu=4, cpu=1000, prio=3, at=1, gpu_type="h100"),
    ]
    s = snap(qs, admitted, pending, flavors=h100)
    first = schedule(s)
    assert [x.workload_id for x in first.admissions] == ["new7"]
    assert first.pending["new6"].reason == "WaitingForPreemptedWorkloads"
    assert first.pending["new5"].reason == "WaitingForQuota"
    again = schedule(apply(s, first))
    assert again.admissions == ()  # was: new5
    assert again.pending["new6"].reason == "WaitingForPreemptedWorkloads"
    assert again.pending["new5"].reason == "WaitingForQuota"
