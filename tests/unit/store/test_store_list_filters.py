"""RunStore.list_runs filters (one query for the API and the portal): queue, submitter,
until and free-text search, combined with each other and with the visible workspaces, on
real SQLite and real PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Engine
from test_store import row  # same directory (pytest puts it on sys.path)

from taugrid.domain.states import Reason, RunState
from taugrid.store import RunStore
from taugrid.store.runs import RunFilter, Transition

S = RunState


def steps(message: str) -> list[Transition]:
    return [
        Transition(S.PENDING, Reason.SUBMITTED, "s"),
        Transition(S.QUEUED, Reason.QUEUED, message),
    ]


def run(run_id: str, **fields: Any) -> dict[str, Any]:
    r = row(run_id, name=fields.pop("name", "train"))
    r.update(fields)
    return r


@pytest.fixture
def store(engine: Engine) -> RunStore:
    clock = iter(float(t) for t in range(100, 1000))
    store = RunStore(engine, clock=lambda: next(clock))
    runs = [  # created at 100, 101, ... in this order
        (run("lr-sweep-aaaaa", name="lr-sweep", experiment_name="Sweep_1"), "q"),
        (run("lr-sweep-bbbbb", name="lr-sweep", submitter="bob", queue="big"), "q"),
        (run("eval-ccccc", name="eval", workspace="b", submitter="carol"), "100% done"),
        (run("eval-ddddd", name="eval", workspace="b", queue="big"), "Waiting for GPUs"),
        (run("ab-eeeee", name="ab", submitter="Dave_X"), "q"),
        (run("axb-fffff", name="axb", workspace="b"), "path a\\b"),
    ]
    for r, message in runs:
        store.create_run(r, steps(message))
    return store


def ids(store: RunStore, **flt: Any) -> list[str]:
    return [r["id"] for r in store.list_runs(RunFilter(**flt))]


def test_queue_submitter_and_until(store: RunStore) -> None:
    assert ids(store, queue="big") == ["eval-ddddd", "lr-sweep-bbbbb"]
    assert ids(store, submitter="bob") == ["lr-sweep-bbbbb"]
    assert ids(store, submitter="Bob") == []  # exact, as name and workspace are
    assert ids(store, until=102.0) == ["lr-sweep-bbbbb", "lr-sweep-aaaaa"]  # before 102
    assert ids(store, since=101.0, until=103.0) == ["eval-ccccc", "lr-sweep-bbbbb"]
    assert ids(store, queue="big", submitter="me", workspace="b") == ["eval-ddddd"]


def test_text_matches_any_field_ignoring_case(store: RunStore) -> None:
    assert ids(store, text="SWEEP") == ["lr-sweep-bbbbb", "lr-sweep-aaaaa"]  # name, id
    assert ids(store, text="sweep_1") == ["lr-sweep-aaaaa"]  # experiment
    assert ids(store, text="dave") == ["ab-eeeee"]  # submitter
    assert ids(store, text="waiting for") == ["eval-ddddd"]  # message
    assert ids(store, text="ccccc") == ["eval-ccccc"]  # id
    assert ids(store, text="nothing like it") == []


def test_like_wildcards_in_the_text_are_literal(store: RunStore) -> None:
    assert ids(store, text="%") == ["eval-ccccc"]  # only the message with a % in it
    assert ids(store, text="100%") == ["eval-ccccc"]
    # `_` matches itself only: not the `x` of "axb" nor the `-` of "lr-sweep".
    assert ids(store, text="a_b") == []
    assert ids(store, text="_") == ["ab-eeeee", "lr-sweep-aaaaa"]  # Dave_X, Sweep_1
    assert ids(store, text="a\\b") == ["axb-fffff"]  # the escape character itself
    assert ids(store, text="\\") == ["axb-fffff"]


def test_text_combines_with_the_other_filters(store: RunStore) -> None:
    assert ids(store, text="sweep", queue="big") == ["lr-sweep-bbbbb"]
    assert ids(store, text="eval", submitter="carol") == ["eval-ccccc"]
    assert ids(store, text="sweep", until=101.0) == ["lr-sweep-aaaaa"]
    assert ids(store, text="sweep", states=["RUNNING"]) == []


def test_a_search_never_reaches_past_the_visible_workspaces(store: RunStore) -> None:
    only_default = frozenset({"default"})
    assert ids(store, text="eval", visible=only_default) == []
    assert ids(store, text="e", visible=only_default) == [
        "ab-eeeee",
        "lr-sweep-bbbbb",
        "lr-sweep-aaaaa",
    ]
    assert ids(store, text="%", visible=only_default) == []  # b's "100% done"
    # A workspace filter outside the visible ones gives nothing, not that workspace.
    assert ids(store, text="eval", workspace="b", visible=only_default) == []
    assert ids(store, text="eval", visible=frozenset()) == []
    assert ids(store, text="eval", visible=frozenset({"b"})) == ["eval-ddddd", "eval-ccccc"]


def test_pagination_with_a_search(store: RunStore) -> None:
    page1 = store.list_runs(RunFilter(text="E"), limit=2)
    assert [r["id"] for r in page1] == ["axb-fffff", "ab-eeeee"]
    last = page1[-1]
    page2 = store.list_runs(RunFilter(text="E"), limit=10, before=(last["created_at"], last["id"]))
    assert [r["id"] for r in page2] == [
        "eval-ddddd",
        "eval-ccccc",
        "lr-sweep-bbbbb",
        "lr-sweep-aaaaa",
    ]
