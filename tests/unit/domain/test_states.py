import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from taugrid.domain.states import (
    TERMINAL,
    IllegalTransition,
    RunState,
    allowed_targets,
    check_transition,
)

S = RunState


def test_terminal_states_change_only_back_to_queued_for_resume() -> None:
    for state in TERMINAL:
        assert allowed_targets(state) == frozenset({S.QUEUED})
        for target in set(RunState) - {S.QUEUED}:
            with pytest.raises(IllegalTransition):
                check_transition(state, target)


def test_main_path_and_side_paths_are_legal() -> None:
    path = [S.PENDING, S.QUEUED, S.ADMITTED, S.RUNNING, S.SUCCEEDED]
    for a, b in itertools.pairwise(path):
        check_transition(a, b)
    check_transition(S.RUNNING, S.RESTARTING)
    check_transition(S.RESTARTING, S.QUEUED)
    for s in (S.QUEUED, S.ADMITTED, S.RUNNING):
        check_transition(s, S.PREEMPTED)
    check_transition(S.PREEMPTED, S.QUEUED)


def test_no_skipping_admission() -> None:
    with pytest.raises(IllegalTransition):
        check_transition(S.QUEUED, S.RUNNING)
    with pytest.raises(IllegalTransition):
        check_transition(S.PENDING, S.RUNNING)


@given(st.lists(st.sampled_from(list(RunState)), max_size=30))
def test_random_walks_leave_a_terminal_state_only_to_queued(steps: list[RunState]) -> None:
    state = S.PENDING
    for target in steps:
        try:
            check_transition(state, target)
        except IllegalTransition:
            continue
        if state.terminal:
            assert target is S.QUEUED
        state = target
    # every state is reachable from PENDING only through the table
    assert state in RunState
