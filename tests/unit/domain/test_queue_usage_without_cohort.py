"""A queue without a cohort never borrows: usage above its nominal quota (runs re-adopted
by a server that now has fewer GPUs) is usage, not borrowing."""

from __future__ import annotations

from test_scheduling_support import adm, cq, fq, snap, wl

from taugrid.domain.scheduling import queue_usage


def test_over_nominal_without_a_cohort_is_not_borrowed() -> None:
    alone = cq("default", fq("local", gpu=0))
    u = queue_usage(snap([alone], [adm(wl("held", "default", gpu=1), "local")]))["default"]
    assert u.used == {"local": {"gpu": 1}} and u.quota == {"local": {"gpu": 0}}
    assert u.borrowed == {"local": {"gpu": 0}}


def test_a_queue_in_a_cohort_still_borrows() -> None:
    a = cq("a", fq("f", gpu=1), cohort="c")
    b = cq("b", fq("f", gpu=2), cohort="c")
    u = queue_usage(snap([a, b], [adm(wl("x", "a", gpu=2), "f")]))
    assert u["a"].borrowed == {"f": {"gpu": 1}}
