"""Every rule of test_scheduling.py again, decided by the incremental scheduler.

Each case runs with ``schedule`` replaced by a ``Scheduler`` that has already decided a
pass over part of the same snapshot (half its waiting runs), so the case's answer comes
from kept state (entries, parts, classes) brought up to date, not from a fresh start.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest
import test_scheduling as rules

from taugrid.domain.quota import Snapshot
from taugrid.domain.scheduling import Decisions
from taugrid.domain.scheduling_state import Scheduler

CASES = [getattr(rules, name) for name in sorted(dir(rules)) if name.startswith("test_")]


def warmed(snap: Snapshot) -> Decisions:
    scheduler = Scheduler()
    scheduler.decide(replace(snap, pending=snap.pending[: len(snap.pending) // 2]))
    return scheduler.decide(snap)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.__name__)
def test_rule_holds_for_the_incremental_scheduler(
    case: Callable[[], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rules, "schedule", warmed)
    case()
