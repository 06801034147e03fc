"""The head of each queue as one caller sees it: the scheduler's order, its own
positions, only readable workspaces, at most three."""

from __future__ import annotations

from taugrid.domain.queue_heads import Head, queue_heads
from taugrid.domain.scheduling_types import Pending


def _pending(run_id: str, queue: str, position: int) -> Pending:
    return Pending(run_id, queue, position, "WaitingForQuota", f"why {run_id}")


PENDING = {
    p.workload_id: p
    for p in (
        _pending("a-1", "gpu", 2),
        _pending("b-1", "gpu", 1),
        _pending("a-2", "gpu", 4),
        _pending("a-3", "gpu", 3),
        _pending("a-4", "gpu", 5),
        _pending("b-2", "cpu", 1),
    )
}
QUEUED = [("a-1", "a"), ("b-1", "b"), ("a-2", "a"), ("a-3", "a"), ("a-4", "a"), ("b-2", "b")]


def test_an_admin_sees_the_first_three_of_every_queue_in_order() -> None:
    heads = queue_heads(QUEUED, PENDING, None)
    assert [h.run_id for h in heads["gpu"]] == ["b-1", "a-1", "a-3"]
    assert heads["cpu"] == [Head("b-2", "b", 1, "WaitingForQuota", "why b-2")]


def test_others_see_only_their_workspaces_runs_at_their_real_positions() -> None:
    heads = queue_heads(QUEUED, PENDING, frozenset({"a"}))
    assert [(h.run_id, h.position) for h in heads["gpu"]] == [("a-1", 2), ("a-3", 3), ("a-2", 4)]
    assert "cpu" not in heads  # nothing of theirs waits there


def test_runs_the_scheduler_has_not_explained_or_no_longer_queued_are_left_out() -> None:
    queued = [("a-1", "a"), ("new-1", "a")]  # new-1 came after the last pass
    heads = queue_heads(queued, PENDING, None, most=10)
    assert [h.run_id for h in heads["gpu"]] == ["a-1"]  # b-1 etc. were admitted meanwhile
