"""The local scheduler's rules (Kueue semantics plus per-user limits), one small snapshot each."""

from __future__ import annotations

from test_scheduling_support import adm, admitted_ids, cq, fq, snap, victims, wl

from taugrid.domain.quota import (
    Admitted,
    ClusterQueue,
    Flavor,
    ReclaimWithinCohort,
    UserLimit,
    WithinClusterQueue,
)
from taugrid.domain.scheduling import never_fits, queue_usage, schedule

GIB = 1 << 30


# -- quota fit, flavors, gangs --------------------------------------------------------------
def test_admits_up_to_nominal_quota_and_no_further() -> None:
    q = cq("a", fq("f", gpu=4))
    d = schedule(
        snap(
            [q],
            [],
            [wl("w1", "a", gpu=2, at=1), wl("w2", "a", gpu=2, at=2), wl("w3", "a", gpu=1, at=3)],
        )
    )
    assert admitted_ids(d) == ["w1", "w2"]
    assert d.pending["w3"].reason == "WaitingForQuota"
    assert d.admissions[0].flavor == "f" and d.admissions[0].borrowed == {}


def test_usage_of_admitted_workloads_counts() -> None:
    q = cq("a", fq("f", gpu=4))
    d = schedule(snap([q], [adm(wl("old", "a", gpu=3))], [wl("w", "a", gpu=2)]))
    assert admitted_ids(d) == []
    d = schedule(snap([q], [adm(wl("old", "a", gpu=2))], [wl("w", "a", gpu=2)]))
    assert admitted_ids(d) == ["w"]


def test_flavors_are_tried_in_the_queues_order() -> None:
    q = cq("a", fq("first", gpu=2), fq("second", gpu=4))
    d = schedule(snap([q], [], [wl("w1", "a", gpu=2, at=1), wl("w2", "a", gpu=2, at=2)]))
    assert [(a.workload_id, a.flavor) for a in d.admissions] == [("w1", "first"), ("w2", "second")]


def test_gpu_type_selects_flavors() -> None:
    q = cq("a", fq("h100", gpu=4), fq("a100", gpu=4))
    flavors = [Flavor("h100", gpu_type="h100"), Flavor("a100", gpu_type="a100")]
    pending = [
        wl("wants-a100", "a", gpu=2, gpu_type="a100", at=1),
        wl("any", "a", gpu=1, at=2),
        wl("wants-l4", "a", gpu=1, gpu_type="l4", at=3),
    ]
    d = schedule(snap([q], [], pending, flavors=flavors))
    assert {a.workload_id: a.flavor for a in d.admissions} == {"wants-a100": "a100", "any": "h100"}
    assert d.pending["wants-l4"].reason == "NoMatchingFlavor"
    assert "GPU type l4" in d.pending["wants-l4"].message


def test_gpu_type_flavor_full_is_not_replaced_by_another_type() -> None:
    q = cq("a", fq("h100", gpu=2), fq("a100", gpu=8))
    flavors = [Flavor("h100", gpu_type="h100"), Flavor("a100", gpu_type="a100")]
    used = adm(wl("x", "a", gpu=2, gpu_type="h100"), "h100")
    d = schedule(snap([q], [used], [wl("w", "a", gpu=1, gpu_type="h100")], flavors=flavors))
    assert admitted_ids(d) == []
    assert d.pending["w"].reason == "WaitingForQuota"


def test_gang_takes_every_resource_from_one_flavor_or_nothing() -> None:
    q = cq("a", fq("f1", gpu=4, cpu=2000), fq("f2", gpu=2, cpu=16000))
    # f1 has the GPUs but not the CPU; f2 has both: never 4 GPUs from f1 + CPU from f2.
    d = schedule(snap([q], [], [wl("w", "a", gpu=2, cpu=8000)]))
    assert [(a.workload_id, a.flavor) for a in d.admissions] == [("w", "f2")]
    d = schedule(snap([q], [], [wl("w", "a", gpu=4, cpu=8000)]))
    assert admitted_ids(d) == []
    assert d.pending["w"].reason == "ExceedsMaxQuota"


def test_resource_without_quota_in_a_flavor_does_not_fit_unless_zero() -> None:
    q = cq("a", fq("f", gpu=4))
    d = schedule(snap([q], [], [wl("cpu-only", "a", cpu=1000), wl("gpu-only", "a", gpu=1)]))
    assert admitted_ids(d) == ["gpu-only"]
    assert d.pending["cpu-only"].reason == "ExceedsMaxQuota"


# -- order ----------------------------------------------------------------------------------
def test_priority_first_then_fifo_then_id() -> None:
    q = cq("a", fq("f", gpu=1))
    pending = [wl("old-low", "a", gpu=1, at=1), wl("new-high", "a", gpu=1, prio=5, at=9)]
    assert admitted_ids(schedule(snap([q], [], pending))) == ["new-high"]
    pending = [wl("b", "a", gpu=1, at=2), wl("a2", "a", gpu=1, at=1)]
    assert admitted_ids(schedule(snap([q], [], pending))) == ["a2"]
    pending = [wl("b", "a", gpu=1, at=1), wl("a", "a", gpu=1, at=1)]
    assert admitted_ids(schedule(snap([q], [], pending))) == ["a"]


def test_positions_follow_queue_order() -> None:
    q = cq("a", fq("f", gpu=1))
    pending = [wl(f"w{i}", "a", gpu=1, at=i, prio=i % 2) for i in range(5)]
    d = schedule(snap([q], [adm(wl("x", "a", gpu=1))], pending))
    pos = {k: p.position for k, p in d.pending.items()}
    assert pos == {"w1": 1, "w3": 2, "w0": 3, "w2": 4, "w4": 5}
    assert "position 2 of 5 in queue a" in d.pending["w3"].message


def test_positions_count_only_runs_still_waiting() -> None:
    q = cq("a", fq("f", gpu=2))
    pending = [wl(f"w{i}", "a", gpu=1, at=i) for i in range(5)]
    d = schedule(snap([q], [], pending))
    assert admitted_ids(d) == ["w0", "w1"]
    assert {k: (p.position, p.message[-26:]) for k, p in d.pending.items()} == {
        "w2": (1, "position 1 of 3 in queue a"),
        "w3": (2, "position 2 of 3 in queue a"),
        "w4": (3, "position 3 of 3 in queue a"),
    }


def test_across_queues_higher_priority_then_older_wins_shared_quota() -> None:
    a = cq("a", fq("f", gpu=0), cohort="c")
    b = cq("b", fq("f", gpu=0), cohort="c")
    lender = cq("l", fq("f", gpu=2), cohort="c")
    pending = [wl("a1", "a", gpu=2, at=1), wl("b1", "b", gpu=2, prio=1, at=5)]
    assert admitted_ids(schedule(snap([a, b, lender], [], pending))) == ["b1"]
    pending = [wl("a1", "a", gpu=2, at=3), wl("b1", "b", gpu=2, at=2)]
    assert admitted_ids(schedule(snap([a, b, lender], [], pending))) == ["b1"]


def test_a_queue_taking_its_own_nominal_goes_before_a_borrower() -> None:
    # Kueue sorts heads that fit without borrowing first: b's lower-priority run uses b's
    # own quota, so a's higher-priority run cannot borrow it away in the same cycle.
    a = cq("a", fq("f", gpu=2), cohort="c")
    b = cq("b", fq("f", gpu=2), cohort="c")
    pending = [wl("a-big", "a", gpu=4, prio=9, at=1), wl("b-own", "b", gpu=2, at=2)]
    d = schedule(snap([a, b], [], pending))
    assert admitted_ids(d) == ["b-own"]
    assert d.pending["a-big"].reason == "WaitingForQuota"


# -- queueing strategies --------------------------------------------------------------------
def test_strict_fifo_head_blocks_the_rest() -> None:
    q = cq("a", fq("f", gpu=4), strict=True)
    pending = [wl("big", "a", gpu=4, at=1), wl("small", "a", gpu=1, at=2)]
    d = schedule(snap([q], [adm(wl("x", "a", gpu=2))], pending))
    assert admitted_ids(d) == []
    assert d.pending["big"].reason == "WaitingForQuota"
    assert d.pending["small"].reason == "BlockedByHead"
    assert "big" in d.pending["small"].message and "StrictFIFO" in d.pending["small"].message


def test_best_effort_fifo_lets_smaller_runs_pass_and_the_head_keeps_its_place() -> None:
    q = cq("a", fq("f", gpu=4))
    pending = [wl("big", "a", gpu=4, at=1), wl("small", "a", gpu=1, at=2)]
    d = schedule(snap([q], [adm(wl("x", "a", gpu=2))], pending))
    assert admitted_ids(d) == ["small"]
    assert d.pending["big"].position == 1


def test_strict_fifo_head_that_fits_admits_in_order() -> None:
    q = cq("a", fq("f", gpu=4), strict=True)
    pending = [wl("w1", "a", gpu=2, at=1), wl("w2", "a", gpu=2, at=2), wl("w3", "a", gpu=1, at=3)]
    d = schedule(snap([q], [], pending))
    assert admitted_ids(d) == ["w1", "w2"]
    assert d.pending["w3"].reason == "WaitingForQuota"


# -- cohorts: borrowing and lending -------------------------------------------------------------
def test_borrowing_from_the_cohort_is_reported() -> None:
    a = cq("a", fq("f", gpu=4), cohort="c")
    b = cq("b", fq("f", gpu=4), cohort="c")
    d = schedule(snap([a, b], [], [wl("w", "a", gpu=6)]))
    assert [(x.workload_id, dict(x.borrowed)) for x in d.admissions] == [("w", {"gpu": 2})]


def test_borrowing_is_bounded_by_what_the_others_do_not_use() -> None:
    a = cq("a", fq("f", gpu=4), cohort="c")
    b = cq("b", fq("f", gpu=4), cohort="c")
    d = schedule(snap([a, b], [adm(wl("x", "b", gpu=3))], [wl("w", "a", gpu=6)]))
    assert admitted_ids(d) == []
    d = schedule(snap([a, b], [adm(wl("x", "b", gpu=3))], [wl("w", "a", gpu=5)]))
    assert admitted_ids(d) == ["w"]


def test_borrowing_limit_caps_the_borrowed_amount() -> None:
    a = cq("a", fq("f", gpu=(4, 1, None)), cohort="c")
    b = cq("b", fq("f", gpu=8), cohort="c")
    d = schedule(snap([a, b], [], [wl("too-big", "a", gpu=6, at=1), wl("ok", "a", gpu=5, at=2)]))
    assert admitted_ids(d) == ["ok"]
    assert d.pending["too-big"].reason == "ExceedsMaxQuota"
    # Limit counts what is already borrowed: 4 nominal + 1 borrowed in use, 1 more does not fit.
    d = schedule(snap([a, b], [adm(wl("x", "a", gpu=5))], [wl("w", "a", gpu=1)]))
    assert admitted_ids(d) == []
    assert "borrowing limit 1, 1 already borrowed" in d.pending["w"].message


def test_lending_limit_keeps_the_rest_for_the_lender() -> None:
    a = cq("a", fq("f", gpu=2), cohort="c")
    b = cq("b", fq("f", gpu=(8, None, 3)), cohort="c")  # lends at most 3 of its 8
    d = schedule(snap([a, b], [], [wl("w", "a", gpu=6)]))
    assert admitted_ids(d) == []
    assert d.pending["w"].reason == "ExceedsMaxQuota"
    d = schedule(snap([a, b], [], [wl("w", "a", gpu=5)]))
    assert [(x.workload_id, dict(x.borrowed)) for x in d.admissions] == [("w", {"gpu": 3})]
    # The lender keeps its 5 guaranteed even while 3 are lent.
    d = schedule(snap([a, b], [adm(wl("x", "a", gpu=5))], [wl("own", "b", gpu=5)]))
    assert admitted_ids(d) == ["own"]


def test_no_borrowing_without_a_cohort() -> None:
    a = cq("a", fq("f", gpu=4))
    b = cq("b", fq("f", gpu=4))
    d = schedule(snap([a, b], [], [wl("w", "a", gpu=5)]))
    assert admitted_ids(d) == []
    assert d.pending["w"].reason == "ExceedsMaxQuota"
    d = schedule(snap([a, b], [adm(wl("x", "a", gpu=3))], [wl("w", "a", gpu=2)]))
    assert "has no cohort to borrow from" in d.pending["w"].message


def test_other_cohorts_do_not_lend() -> None:
    a = cq("a", fq("f", gpu=4), cohort="c1")
    b = cq("b", fq("f", gpu=4), cohort="c2")
    d = schedule(snap([a, b], [], [wl("w", "a", gpu=5)]))
    assert admitted_ids(d) == []


# -- preemption within a ClusterQueue ----------------------------------------------------------
def _full_queue(policy: WithinClusterQueue) -> tuple[ClusterQueue, list[Admitted]]:
    q = cq("a", fq("f", gpu=4), within=policy)
    running = [
        adm(wl("low", "a", gpu=2, prio=0, at=1), at=1),
        adm(wl("equal-old", "a", gpu=1, prio=5, at=1), at=1),
        adm(wl("equal-new", "a", gpu=1, prio=5, at=9), at=9),
    ]
    return q, running


def test_within_never_does_not_preempt() -> None:
    q, running = _full_queue("Never")
    d = schedule(snap([q], running, [wl("p", "a", gpu=2, prio=5, at=5)]))
    assert d.preemptions == ()
    assert d.pending["p"].reason == "WaitingForQuota"


def test_within_lower_priority_preempts_only_lower() -> None:
    q, running = _full_queue("LowerPriority")
    d = schedule(snap([q], running, [wl("p", "a", gpu=2, prio=5, at=5)]))
    assert victims(d) == ["low"]
    assert d.preemptions[0].reason == "InClusterQueue" and d.preemptions[0].preemptor_id == "p"
    assert d.pending["p"].reason == "WaitingForPreemptedWorkloads"
    d = schedule(snap([q], running, [wl("p", "a", gpu=3, prio=5, at=5)]))
    assert d.preemptions == ()  # equal priority is never a victim under LowerPriority


def test_within_lower_or_newer_equal_preempts_newer_equal_not_older() -> None:
    q, running = _full_queue("LowerOrNewerEqualPriority")
    d = schedule(snap([q], running, [wl("p", "a", gpu=3, prio=5, at=5)]))
    assert victims(d) == ["equal-new", "low"]
    d = schedule(snap([q], running, [wl("p", "a", gpu=4, prio=5, at=5)]))
    assert d.preemptions == ()  # would need equal-old, which is older


def test_minimal_victim_set_puts_back_what_is_not_needed() -> None:
    q = cq("a", fq("f", gpu=5), within="LowerPriority")
    running = [adm(wl("tiny", "a", gpu=1, prio=0)), adm(wl("big", "a", gpu=4, prio=1))]
    d = schedule(snap([q], running, [wl("p", "a", gpu=4, prio=9)]))
    assert victims(d) == ["big"]  # tiny went first but is put back: big alone suffices


def test_victims_lowest_priority_then_most_recently_admitted() -> None:
    q = cq("a", fq("f", gpu=3), within="LowerPriority")
    running = [
        adm(wl("p1-old", "a", gpu=1, prio=1), at=1),
        adm(wl("p1-new", "a", gpu=1, prio=1), at=2),
        adm(wl("p2", "a", gpu=1, prio=2), at=3),
    ]
    d = schedule(snap([q], running, [wl("p", "a", gpu=1, prio=9)]))
    assert victims(d) == ["p1-new"]
    d = schedule(snap([q], running, [wl("p", "a", gpu=2, prio=9)]))
    assert victims(d) == ["p1-new", "p1-old"]


def test_evicting_workloads_are_never_chosen_again_and_the_preemptor_waits() -> None:
    q = cq("a", fq("f", gpu=4), within="LowerPriority")
    running = [adm(wl("going", "a", gpu=2), evicting=True), adm(wl("stay", "a", gpu=2))]
    d = schedule(snap([q], running, [wl("p", "a", gpu=2, prio=9)]))
    assert d.preemptions == () and admitted_ids(d) == []
    assert d.pending["p"].reason == "WaitingForPreemptedWorkloads"
    assert "1 run being preempted" in d.pending["p"].message
    # Needing more than the evicting run frees: one new victim on top, not two.
    d = schedule(snap([q], running, [wl("p", "a", gpu=4, prio=9)]))
    assert victims(d) == ["stay"]


def test_each_preemptor_keeps_the_victims_it_chose() -> None:
    q = cq("a", fq("f", gpu=6), within="LowerPriority")
    running = [
        adm(wl("busy", "a", gpu=2, prio=1)),
        Admitted(wl("v-high", "a", gpu=2, prio=1), "f", 0.0, True, "p-high"),
        Admitted(wl("v-mid", "a", gpu=2, prio=0), "f", 0.0, True, "p-mid"),
    ]
    pending = [wl("p-high", "a", gpu=2, prio=2), wl("p-mid", "a", gpu=1, prio=1)]
    d = schedule(snap([q], running, pending))
    assert d.preemptions == () and admitted_ids(d) == []
    assert d.pending["p-high"].reason == "WaitingForPreemptedWorkloads"
    assert "(v-high) has stopped" in d.pending["p-high"].message
    assert d.pending["p-mid"].reason == "WaitingForPreemptedWorkloads"
    assert "(v-mid) has stopped" in d.pending["p-mid"].message


def test_preemptors_quota_is_not_taken_by_a_smaller_run() -> None:
    q = cq("a", fq("f", gpu=8), within="LowerPriority")
    running = [adm(wl("victim", "a", gpu=6, prio=0))]
    pending = [wl("p", "a", gpu=8, prio=9, at=1), wl("small", "a", gpu=2, prio=5, at=2)]
    d = schedule(snap([q], running, pending))
    assert victims(d) == ["victim"] and admitted_ids(d) == []
    assert d.pending["small"].reason == "WaitingForQuota"
    assert "held for p" in d.pending["small"].message
    # Next cycle, victim still stopping: still nothing for the small run.
    running = [Admitted(wl("victim", "a", gpu=6, prio=0), "f", 0.0, True, "p")]
    d = schedule(snap([q], running, pending))
    assert d.preemptions == () and admitted_ids(d) == []
    assert d.pending["p"].reason == "WaitingForPreemptedWorkloads"
    # Victim gone: the preemptor starts.
    assert admitted_ids(schedule(snap([q], [], pending))) == ["p"]


def test_two_preemptors_do_not_share_one_victim() -> None:
    q = cq("a", fq("f", gpu=4), within="LowerPriority")
    running = [adm(wl("v1", "a", gpu=2, prio=0), at=1), adm(wl("v2", "a", gpu=2, prio=0), at=2)]
    pending = [wl("p1", "a", gpu=2, prio=9, at=1), wl("p2", "a", gpu=2, prio=9, at=2)]
    d = schedule(snap([q], running, pending))
    assert victims(d) == ["v1", "v2"]
    assert {p.victim_id: p.preemptor_id for p in d.preemptions} == {"v2": "p1", "v1": "p2"}


# -- reclaim within the cohort --------------------------------------------------------------------
def _borrowed_cohort(
    reclaim: ReclaimWithinCohort, prio: int = 5
) -> tuple[ClusterQueue, ClusterQueue, list[Admitted]]:
    a = cq("a", fq("f", gpu=4), cohort="c", reclaim=reclaim)
    b = cq("b", fq("f", gpu=4), cohort="c")
    running = [
        adm(wl("b-own", "b", gpu=4, prio=prio), at=1),
        adm(wl("b-borrow", "b", gpu=3, prio=prio), at=2),
    ]
    return a, b, running


def test_reclaim_never_leaves_borrowers_alone() -> None:
    a, b, running = _borrowed_cohort("Never", prio=0)
    d = schedule(snap([a, b], running, [wl("p", "a", gpu=2, prio=9)]))
    assert d.preemptions == ()
    assert "lent to other queues of cohort c" in d.pending["p"].message


def test_reclaim_lower_priority_takes_back_lent_quota_from_lower_only() -> None:
    a, b, running = _borrowed_cohort("LowerPriority", prio=0)
    d = schedule(snap([a, b], running, [wl("p", "a", gpu=2, prio=9)]))
    assert victims(d) == ["b-borrow"]
    assert d.preemptions[0].reason == "InCohortReclamation"
    a, b, running = _borrowed_cohort("LowerPriority", prio=9)
    d = schedule(snap([a, b], running, [wl("p", "a", gpu=2, prio=9)]))
    assert d.preemptions == ()


def test_reclaim_any_takes_back_lent_quota_from_higher_priority_too() -> None:
    a, b, running = _borrowed_cohort("Any", prio=100)
    d = schedule(snap([a, b], running, [wl("p", "a", gpu=2, prio=0)]))
    assert victims(d) == ["b-borrow"]


def test_reclaim_only_while_below_nominal_and_only_up_to_nominal() -> None:
    a, b, running = _borrowed_cohort("Any", prio=0)
    # a wants 5 > its nominal 4: that is borrowing, not reclaiming.
    d = schedule(snap([a, b], running, [wl("p", "a", gpu=5, prio=9)]))
    assert d.preemptions == ()
    # a already at nominal (borrowed room is b's own quota): nothing to reclaim.
    full = [*running[:1], adm(wl("a-own", "a", gpu=4))]
    d = schedule(snap([a, b], full, [wl("p", "a", gpu=1, prio=9)]))
    assert d.preemptions == ()


def test_reclaim_skips_queues_that_do_not_borrow_and_prefers_the_biggest_borrower() -> None:
    a = cq("a", fq("f", gpu=6), cohort="c", reclaim="Any")
    b = cq("b", fq("f", gpu=2), cohort="c")
    c = cq("c", fq("f", gpu=2), cohort="c")
    running = [
        adm(wl("b1", "b", gpu=2), at=1),
        adm(wl("b2", "b", gpu=1), at=2),  # b borrows 1
        adm(wl("c1", "c", gpu=2), at=1),
        adm(wl("c2", "c", gpu=2), at=2),  # c borrows 2
        adm(wl("a1", "a", gpu=2), at=1),
    ]
    d = schedule(snap([a, b, c], running, [wl("p", "a", gpu=2, prio=1)]))
    assert victims(d) == ["c2"]


# -- per-user limits ----------------------------------------------------------------------------
def test_user_max_running_and_max_gpus() -> None:
    q = cq("a", fq("f", gpu=16))
    limits = {"ws": UserLimit(max_running=2, max_gpus=4)}
    running = [adm(wl("r1", "a", gpu=1, user="ann"))]
    pending = [
        wl("ann-2", "a", gpu=1, user="ann", at=1),
        wl("ann-3", "a", gpu=1, user="ann", at=2),
        wl("bob-big", "a", gpu=4, user="bob", at=3),
        wl("bob-more", "a", gpu=1, user="bob", at=4),
    ]
    d = schedule(snap([q], running, pending, limits=limits))
    assert admitted_ids(d) == ["ann-2", "bob-big"]
    assert d.pending["ann-3"].reason == "UserLimit"
    assert "2 of 2 allowed runs" in d.pending["ann-3"].message
    assert d.pending["bob-more"].reason == "UserLimit"
    assert "per-user limit of 4" in d.pending["bob-more"].message


def test_user_limits_are_per_workspace() -> None:
    q = cq("a", fq("f", gpu=16))
    limits = {"ws": UserLimit(max_running=1)}
    running = [adm(wl("r1", "a", gpu=1, user="ann", ws="ws"))]
    pending = [wl("elsewhere", "a", gpu=1, user="ann", ws="other")]
    assert admitted_ids(schedule(snap([q], running, pending, limits=limits))) == ["elsewhere"]


def test_a_user_at_their_limit_does_not_block_a_strict_fifo_queue() -> None:
    q = cq("a", fq("f", gpu=8), strict=True)
    limits = {"ws": UserLimit(max_running=1)}
    running = [adm(wl("r1", "a", gpu=1, user="ann"))]
    pending = [wl("ann-2", "a", gpu=1, user="ann", at=1), wl("bob", "a", gpu=1, user="bob", at=2)]
    d = schedule(snap([q], running, pending, limits=limits))
    assert admitted_ids(d) == ["bob"]
    assert d.pending["ann-2"].reason == "UserLimit"


# -- never fits --------------------------------------------------------------------------------
def test_never_fits_explains_max_quota_with_the_cohort() -> None:
    a = cq("team-a", fq("h100", gpu=(8, 4, None)), cohort="research")
    b = cq("team-b", fq("h100", gpu=8), cohort="research")
    s = snap([a, b])
    assert never_fits(wl("ok", "team-a", gpu=12), s) is None
    why = never_fits(wl("big", "team-a", gpu=13), s)
    assert why is not None and "13 GPUs" in why and "12 GPUs of flavor h100" in why
    assert "cohort research" in why


def test_never_fits_without_cohort_and_for_gpu_type_and_unknown_queue() -> None:
    a = cq("a", fq("h100", gpu=8))
    s = snap([a], flavors=[Flavor("h100", gpu_type="h100")])
    assert never_fits(wl("w", "a", gpu=8), s) is None
    why = never_fits(wl("w", "a", gpu=9), s)
    assert why is not None and "8 GPUs of flavor h100" in why
    why = never_fits(wl("w", "a", gpu=1, gpu_type="a100"), s)
    assert why is not None and "GPU type a100" in why and "h100" in why
    why = never_fits(wl("w", "nope", gpu=1), s)
    assert why is not None and "queue nope does not exist" in why


def test_never_fits_ignores_current_usage_and_counts_user_gpu_limit() -> None:
    a = cq("a", fq("f", gpu=4))
    s = snap([a], [adm(wl("x", "a", gpu=4))], limits={"ws": UserLimit(max_gpus=2)})
    assert never_fits(wl("w", "a", gpu=2), s) is None
    why = never_fits(wl("w", "a", gpu=3), s)
    assert why is not None and "at most 2" in why


# -- queue usage -----------------------------------------------------------------------------
def test_queue_usage_numbers() -> None:
    a = cq("a", fq("f", gpu=4, cpu=8000), cohort="c")
    b = cq("b", fq("f", gpu=4), cohort="c")
    running = [
        adm(wl("x", "a", gpu=4, cpu=2000)),
        adm(wl("y", "a", gpu=2), evicting=True),
        adm(wl("z", "b", gpu=1)),
    ]
    u = queue_usage(snap([a, b], running, [wl("p", "a", gpu=1), wl("q", "a", gpu=1)]))
    assert u["a"].cohort == "c"
    assert u["a"].quota == {"f": {"gpu": 4, "cpu": 8000}}
    assert u["a"].used == {"f": {"gpu": 6, "cpu": 2000}}
    assert u["a"].borrowed == {"f": {"gpu": 2, "cpu": 0}}
    assert (u["a"].pending, u["a"].running) == (2, 2)
    assert u["b"].used == {"f": {"gpu": 1}} and u["b"].borrowed == {"f": {"gpu": 0}}
    assert (u["b"].pending, u["b"].running) == (0, 1)


# -- messages ----------------------------------------------------------------------------------
def test_waiting_message_has_the_numbers() -> None:
    a = cq("team-a", fq("h100", gpu=8), cohort="research")
    b = cq("team-b", fq("h100", gpu=4), cohort="research")
    running = [adm(wl(f"a{i}", "team-a", gpu=2), "h100") for i in range(3)]
    running += [adm(wl(f"b{i}", "team-b", gpu=2), "h100") for i in range(3)]
    d = schedule(snap([a, b], running, [wl("w", "team-a", gpu=4)]))
    assert d.pending["w"].message == (
        "waiting for 4 GPUs of flavor h100 in queue team-a: 6 of 8 in use by 3 runs;"
        " would need to borrow 2 from cohort research, which has 0 free;"
        " position 1 of 1 in queue team-a"
    )


def test_messages_for_cpu_and_memory_use_cores_and_gib() -> None:
    q = cq("a", fq("f", cpu=4000, memory=8 * GIB))
    running = [adm(wl("x", "a", cpu=3500, memory=6 * GIB))]
    d = schedule(snap([q], running, [wl("c", "a", cpu=1000), wl("m", "a", memory=4 * GIB)]))
    assert "waiting for 1 CPU of flavor f in queue a: 3.5 of 4 in use by 1 run" in (
        d.pending["c"].message
    )
    assert (
        "4 GiB of memory" in d.pending["m"].message and "6 GiB of 8 GiB" in d.pending["m"].message
    )


def test_preemption_messages_name_the_preemptor() -> None:
    q = cq("a", fq("f", gpu=2), within="LowerPriority")
    d = schedule(snap([q], [adm(wl("v", "a", gpu=2, prio=1))], [wl("p", "a", gpu=2, prio=7)]))
    (p,) = d.preemptions
    assert "preempted by p (priority 7)" in p.message and "priority 1" in p.message
    assert "preempting 1 run (v) to free 2 GPUs" in d.pending["p"].message


def test_no_workload_is_both_admitted_and_pending() -> None:
    q = cq("a", fq("f", gpu=2))
    pending = [wl(f"w{i}", "a", gpu=1, at=i) for i in range(4)]
    d = schedule(snap([q], [], pending))
    assert set(admitted_ids(d)) == {"w0", "w1"}
    assert set(d.pending) == {"w2", "w3"}


def test_a_run_that_can_never_fit_does_not_block_a_strict_fifo_queue() -> None:
    q = cq("a", fq("f", gpu=4), strict=True)
    d = schedule(snap([q], [], [wl("huge", "a", gpu=9, at=1), wl("ok", "a", gpu=1, at=2)]))
    assert admitted_ids(d) == ["ok"]
    assert d.pending["huge"].reason == "ExceedsMaxQuota"


def test_a_strict_fifo_head_that_reaches_its_user_limit_stops_blocking() -> None:
    # ann's head in queue a waits for quota; her run in queue b is admitted in the same
    # cycle and brings her to her limit: from then on the head is held by the limit and
    # bob's run behind it is admitted, as the next cycle would do anyway.
    a = cq("a", fq("f", gpu=2), strict=True)
    b = cq("b", fq("f", gpu=2))
    limits = {"ws": UserLimit(max_running=1)}
    pending = [
        wl("ann-a", "a", gpu=2, prio=5, user="ann", at=1),
        wl("ann-b", "b", gpu=1, user="ann", at=2),
        wl("bob-a", "a", gpu=1, user="bob", at=3),
    ]
    d = schedule(snap([a, b], [adm(wl("x", "a", gpu=1, user="cy"))], pending, limits=limits))
    assert sorted(admitted_ids(d)) == ["ann-b", "bob-a"]
    assert d.pending["ann-a"].reason == "UserLimit"


def test_a_run_naming_no_queue_is_reported() -> None:
    d = schedule(snap([cq("a", fq("f", gpu=1))], [], [wl("w", "nope", gpu=1)]))
    assert d.pending["w"].reason == "QueueNotFound"
    assert "queue nope does not exist; queues: a" in d.pending["w"].message
