"""Batched transitions (RunStore.transition_many): the engine's one commit per pass."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, func, select
from test_store import SUBMIT, row  # same directory (pytest puts it on sys.path)

from taugrid.domain.states import Reason, RunState
from taugrid.errors import Conflict, NotFound
from taugrid.store import RunStore
from taugrid.store.runs import Move, Transition
from taugrid.store.tables import attempts, events

S = RunState
ADMIT = Transition(S.ADMITTED, Reason.ADMITTED, "a")
START = Transition(S.RUNNING, Reason.STARTED, "r")
DONE = Transition(S.SUCCEEDED, Reason.COMPLETED, "ok")
BACK = Transition(S.QUEUED, Reason.QUEUED, "back")


def _event_log(engine: Engine) -> list[tuple[str, str | None, str]]:
    """Every event row in insertion order: (run, from, to)."""
    q = select(events.c.run_id, events.c.from_state, events.c.to_state).order_by(events.c.id)
    with engine.connect() as conn:
        return [(r, f, t) for r, f, t in conn.execute(q)]


def _admit(run_id: str) -> Move:
    return Move(run_id, ADMIT, new_attempt={"placement": {"gpus": []}, "attempt_dir": "/x"})


def test_a_batch_writes_every_move_and_its_event_in_order(engine: Engine) -> None:
    store = RunStore(engine)
    ids = [f"t-{i:05d}" for i in range(5)]
    store.create_runs([(row(i), SUBMIT) for i in ids])
    before = len(_event_log(engine))
    results = store.transition_many([_admit(i) for i in ids])
    assert [r["state"] for r in results if isinstance(r, dict)] == ["ADMITTED"] * 5
    # A run may move twice in one batch: the second move sees the state the first left.
    moves = []
    for i in reversed(ids):
        moves.append(Move(i, START, fields={"started_at": 7.0}, attempt_update={"started_at": 7.0}))
        moves.append(Move(i, DONE, fields={"exit_code": 0}, attempt_update={"exit_code": 0}))
    results = store.transition_many(moves)
    assert [r["state"] for r in results if isinstance(r, dict)] == ["RUNNING", "SUCCEEDED"] * 5
    log = _event_log(engine)[before:]
    assert log[:5] == [(i, "QUEUED", "ADMITTED") for i in ids]
    expected = []
    for i in reversed(ids):
        expected += [(i, "ADMITTED", "RUNNING"), (i, "RUNNING", "SUCCEEDED")]
    assert log[5:] == expected
    for i in ids:
        run = store.get(i)
        assert run is not None
        assert (run["state"], run["started_at"], run["exit_code"]) == ("SUCCEEDED", 7.0, 0)
        assert run["attempt_count"] == 1
        (att,) = store.attempts(i)
        assert (att["started_at"], att["exit_code"]) == (7.0, 0)


def test_a_forbidden_move_is_a_conflict_in_its_place_and_writes_nothing(engine: Engine) -> None:
    store = RunStore(engine)
    store.create_runs([(row("t-00001"), SUBMIT), (row("t-00002"), SUBMIT)])
    store.cancel_many(["t-00002"])  # CANCELLED before the engine gets to it
    before = _event_log(engine)
    results = store.transition_many(
        [_admit("t-00002"), _admit("t-00001"), Move("t-00009", ADMIT), Move("t-00001", BACK)]
    )
    assert isinstance(results[0], Conflict)
    assert isinstance(results[1], dict) and results[1]["state"] == "ADMITTED"
    assert isinstance(results[2], NotFound)
    assert isinstance(results[3], Conflict)  # ADMITTED (as the batch left it) -> QUEUED
    assert _event_log(engine) == [*before, ("t-00001", "QUEUED", "ADMITTED")]
    cancelled = store.get("t-00002")
    assert cancelled is not None and cancelled["state"] == "CANCELLED"
    assert cancelled["attempt_count"] == 0
    with engine.connect() as conn:
        n = conn.execute(select(func.count()).select_from(attempts)).scalar()
    assert n == 1  # the conflicting admission created no attempt row


def test_transition_is_a_batch_of_one(engine: Engine) -> None:
    store = RunStore(engine)
    store.create_run(row("t-00001"), SUBMIT)
    moved = store.transition("t-00001", ADMIT, new_attempt={"placement": {}, "attempt_dir": "/"})
    assert moved["state"] == "ADMITTED" and moved["attempt_count"] == 1
    with pytest.raises(Conflict):
        store.transition("t-00001", BACK)
    with pytest.raises(NotFound):
        store.transition("t-00009", ADMIT)
