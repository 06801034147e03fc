"""Batch writes: many runs created or cancelled in one transaction."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, func, select
from test_store import SUBMIT, row  # same directory (pytest puts it on sys.path)

from taugrid.domain.states import CancelAction, Reason, RunState, cancel_action
from taugrid.errors import Conflict, NotFound
from taugrid.store import RunStore
from taugrid.store.runs import Transition
from taugrid.store.tables import events, runs

S = RunState


def _counts(engine: Engine) -> tuple[int, int]:
    with engine.connect() as conn:
        n_runs = conn.execute(select(func.count()).select_from(runs)).scalar()
        n_events = conn.execute(select(func.count()).select_from(events)).scalar()
    return int(n_runs or 0), int(n_events or 0)


def test_create_runs_records_all_with_fifo_sequence(engine: Engine) -> None:
    store = RunStore(engine)
    results = store.create_runs([(row(f"train-{i:05d}", key=f"k{i}"), SUBMIT) for i in range(50)])
    assert all(created for _, created in results)
    assert _counts(engine) == (50, 100)
    queued = store.in_states([S.QUEUED])
    assert [r["id"] for r in queued] == [f"train-{i:05d}" for i in range(50)]
    assert [r["queued_seq"] for r in queued] == sorted({r["queued_seq"] for r in queued})


def test_create_runs_answers_known_keys_with_the_recorded_run(engine: Engine) -> None:
    store = RunStore(engine)
    first, _ = store.create_run(row("train-aaaaa", key="same"), SUBMIT)
    results = store.create_runs(
        [
            (row("train-bbbbb", key="same"), SUBMIT),  # stored before
            (row("train-ccccc", key="new"), SUBMIT),
            (row("train-ddddd", key="new"), SUBMIT),  # earlier in this batch
        ]
    )
    assert [(r["id"], created) for r, created in results] == [
        ("train-aaaaa", False),
        ("train-ccccc", True),
        ("train-ccccc", False),
    ]
    assert first["id"] == "train-aaaaa"
    assert _counts(engine) == (2, 4)


def test_create_runs_replaces_an_id_that_clashes(engine: Engine) -> None:
    store = RunStore(engine)
    store.create_run(row("train-aaaaa"), SUBMIT)
    results = store.create_runs([(row("train-aaaaa"), SUBMIT), (row("train-aaaaa"), SUBMIT)])
    ids = [r["id"] for r, _ in results]
    assert len(set(ids)) == 2 and "train-aaaaa" not in ids
    assert all(i.startswith("train-") for i in ids)
    assert {r["id"] for r in store.in_states([S.QUEUED])} == {"train-aaaaa", *ids}


def test_create_runs_is_all_or_nothing(engine: Engine) -> None:
    store = RunStore(engine)
    bad = row("train-bbbbb")
    bad["gpus"] = None  # NOT NULL: the database refuses this row
    with pytest.raises(Exception, match=r"(?i)null"):
        store.create_runs([(row("train-aaaaa"), SUBMIT), (bad, SUBMIT)])
    assert _counts(engine) == (0, 0)


def test_cancel_many_acts_per_state_in_one_transaction(engine: Engine) -> None:
    store = RunStore(engine)
    for rid in ("q-aaaaa", "r-aaaaa", "d-aaaaa", "x-aaaaa"):
        store.create_run(row(rid), SUBMIT)
    admit = Transition(S.ADMITTED, Reason.ADMITTED, "a")
    store.transition("r-aaaaa", admit, new_attempt={"placement": {}, "attempt_dir": "/x"})
    store.transition("r-aaaaa", Transition(S.RUNNING, Reason.STARTED, "s"))
    store.transition("d-aaaaa", admit, new_attempt={"placement": {}, "attempt_dir": "/x"})
    store.transition("d-aaaaa", Transition(S.SUCCEEDED, Reason.COMPLETED, "ok"))
    _, n_events = _counts(engine)

    out = store.cancel_many(["q-aaaaa", "r-aaaaa", "d-aaaaa", "nope-zzzzz", "q-aaaaa"])

    assert list(out) == ["q-aaaaa", "r-aaaaa", "d-aaaaa", "nope-zzzzz"]
    queued, running, done, missing = out.values()
    assert isinstance(queued, dict) and queued["state"] == "CANCELLED"
    assert isinstance(running, dict) and running["state"] == "RUNNING"
    assert running["cancel_requested_at"] is not None
    assert isinstance(done, Conflict) and "already SUCCEEDED" in done.message
    assert isinstance(missing, NotFound)
    # Only the queued run changed state: one event; the running one awaits the engine.
    assert _counts(engine)[1] == n_events + 1
    assert store.events("q-aaaaa")[-1]["to_state"] == "CANCELLED"
    stored = store.get("r-aaaaa")
    assert stored is not None and stored["cancel_requested_at"] == running["cancel_requested_at"]
    # A second cancel of the running run keeps the first request time.
    again = store.cancel_many(["r-aaaaa"])["r-aaaaa"]
    assert isinstance(again, dict)
    assert again["cancel_requested_at"] == running["cancel_requested_at"]


@pytest.mark.parametrize(
    ("state", "action"),
    [
        (S.PENDING, CancelAction.STOP_NOW),
        (S.QUEUED, CancelAction.STOP_NOW),
        (S.PREEMPTED, CancelAction.STOP_NOW),
        (S.RESTARTING, CancelAction.STOP_NOW),
        (S.ADMITTED, CancelAction.SIGNAL),
        (S.RUNNING, CancelAction.SIGNAL),
        (S.SUCCEEDED, CancelAction.FINISHED),
        (S.FAILED, CancelAction.FINISHED),
        (S.CANCELLED, CancelAction.FINISHED),
    ],
)
def test_cancel_action_per_state(state: RunState, action: CancelAction) -> None:
    assert cancel_action(state) is action
