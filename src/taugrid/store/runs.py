"""Repository for runs, their events and attempts.

Every state change is a compare-and-set on ``runs.state`` plus an event row, committed
in one transaction before the caller gets an answer.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    Update,
    and_,
    bindparam,
    func,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError

from taugrid.domain.runid import new_run_id
from taugrid.domain.states import (
    CancelAction,
    Reason,
    RunState,
    allowed_targets,
    cancel_action,
    check_transition,
)
from taugrid.domain.stops import StopReason, StopRequest
from taugrid.errors import Ambiguous, Conflict, IdempotencyKeyReused, NotFound, TauError
from taugrid.store.db import write_transaction
from taugrid.store.events import insert_events
from taugrid.store.tables import attempts, events, runs

Row = dict[str, Any]


@dataclass(frozen=True)
class Transition:
    to: RunState
    reason: Reason
    message: str


@dataclass(frozen=True)
class Move:
    """One transition of a batch (:meth:`RunStore.transition_many`): the run, the step,
    columns to set with it, a new attempt row to create, columns of the current attempt
    to update."""

    run_id: str
    step: Transition
    fields: Mapping[str, Any] | None = None
    new_attempt: Mapping[str, Any] | None = None
    attempt_update: Mapping[str, Any] | None = None


# The longest RunFilter.text a request may ask for (the API answers 422 past it).
MAX_SEARCH_CHARS = 256


@dataclass(frozen=True)
class RunFilter:
    states: Sequence[str] = ()
    name: str | None = None
    since: float | None = None
    workspace: str | None = None
    experiment: str | None = None
    queue: str | None = None
    submitter: str | None = None
    until: float | None = None  # created before this (unix seconds); ``since`` is inclusive
    # Free text: a case-insensitive substring of the id, name, experiment, submitter or
    # message (``%`` and ``_`` are literal).
    text: str | None = None
    # The workspaces the caller may see; None: all of them.
    visible: frozenset[str] | None = None


class RunStore:
    def __init__(self, engine: Engine, clock: Callable[[], float] = time.time) -> None:
        self.engine = engine
        self.clock = clock

    # -- creation ---------------------------------------------------------------------
    def create_run(self, row: Mapping[str, Any], steps: Sequence[Transition]) -> tuple[Row, bool]:
        """Insert a run and its first transitions atomically.

        Returns ``(run, created)``. A second submit with the same idempotency key returns
        the first run and ``created=False`` instead of recording the run twice.
        """
        return self.create_runs([(row, steps)])[0]

    def create_runs(
        self, items: Sequence[tuple[Mapping[str, Any], Sequence[Transition]]]
    ) -> list[tuple[Row, bool]]:
        """Insert many runs and their first transitions in one durable transaction.

        All or nothing: either every new run is recorded or none is. An idempotency key
        belongs to its owner (``idempotency_owner``, else the submitter) in the run's
        workspace: a run whose key is known there (stored, or earlier in the same batch)
        is answered with the recorded run and ``created=False``, unless the two carry
        different ``request_hash`` values: then :class:`IdempotencyKeyReused` (its
        ``index`` says which item) and nothing is written. Another owner or workspace
        with the same key gets a run of its own.
        """
        now = self.clock()
        prepared = [_new_run_values(row, steps, now) for row, steps in items]
        try:
            return self._insert_runs(prepared, now)
        except IntegrityError:
            # Another writer (PostgreSQL allows concurrent ones) recorded one of the keys
            # between our check and our insert: the retry finds it and answers with it.
            return self._insert_runs(prepared, now)

    def _insert_runs(
        self, prepared: list[tuple[dict[str, Any], list[_Step]]], now: float
    ) -> list[tuple[Row, bool]]:
        keys = sorted({v["idempotency_key"] for v, _ in prepared if v.get("idempotency_key")})
        results: list[tuple[Row, bool]] = []
        new_rows: list[dict[str, Any]] = []
        new_events: list[dict[str, Any]] = []
        with write_transaction(self.engine) as conn:
            known: dict[tuple[str, str, str], Row] = {}
            if keys:
                q = select(runs).where(runs.c.idempotency_key.in_(keys))
                found = [dict(r) for r in conn.execute(q).mappings()]
                known = {_key_scope(r): r for r in found}
            seq = int(conn.execute(_MAX_SEQ).scalar() or 0)
            ids = [v["id"] for v, _ in prepared]
            taken = set(conn.execute(select(runs.c.id).where(runs.c.id.in_(ids))).scalars())
            for index, (values, log) in enumerate(prepared):
                key = _key_scope(values) if values.get("idempotency_key") else None
                if key is not None and key in known:
                    first = known[key]
                    if _different_requests(first, values):
                        raise IdempotencyKeyReused(
                            "this Idempotency-Key was already used in this workspace for a "
                            "different request; use a new key for a new submission",
                            index=index,
                        )
                    results.append((first, False))
                    continue
                # Ids carry a short random suffix: a rare clash gets a fresh one.
                while values["id"] in taken:
                    values["id"] = new_run_id(values["name"])
                    taken.update(conn.execute(_GET_ID, {"rid": values["id"]}).scalars())
                taken.add(values["id"])
                seq += 1
                run = {**_EMPTY_RUN, **values, "queued_seq": seq}
                new_rows.append({**values, "queued_seq": seq})
                new_events.extend(_event(values["id"], now, frm, s) for frm, s in log)
                results.append((run, True))
                if key is not None:
                    known[key] = run
            if new_rows:
                conn.execute(_INSERT_RUN, new_rows)
                insert_events(conn, new_events)
        return results

    # -- reads ------------------------------------------------------------------------
    def get(self, run_id: str) -> Row | None:
        with self.engine.connect() as conn:
            r = conn.execute(_GET_RUN, {"rid": run_id}).mappings().first()
        return dict(r) if r else None

    def workspace_of(self, run_id: str) -> str | None:
        """The run's workspace; None when no such run exists."""
        with self.engine.connect() as conn:
            found = conn.execute(select(runs.c.workspace).where(runs.c.id == run_id)).first()
        return str(found[0]) if found else None

    def resolve(self, ref: str, visible: frozenset[str] | None = None) -> Row:
        """Find a run by full id, name (the most recent run of it), or unique id prefix,
        among the runs of the ``visible`` workspaces (None: all). A run outside them is
        "not found", exactly like a run that does not exist."""
        scope = [] if visible is None else [runs.c.workspace.in_(sorted(visible))]
        with self.engine.connect() as conn:
            exact = conn.execute(select(runs).where(runs.c.id == ref, *scope)).mappings().first()
            if exact:
                return dict(exact)
            # A name beats a prefix: `tau logs train` means the latest run named train.
            by_name = (
                conn.execute(
                    select(runs)
                    .where(runs.c.name == ref, *scope)
                    .order_by(runs.c.created_at.desc(), runs.c.queued_seq.desc())
                    .limit(1)
                )
                .mappings()
                .first()
            )
            if by_name:
                return dict(by_name)
            prefix = _escape_like(ref) + "%"
            ids = (
                conn.execute(
                    select(runs.c.id).where(runs.c.id.like(prefix, escape="\\"), *scope).limit(6)
                )
                .scalars()
                .all()
            )
        if len(ids) > 1:
            shown = ", ".join(ids[:5]) + (", ..." if len(ids) > 5 else "")
            raise Ambiguous(f"'{ref}' matches several runs: {shown}; give more of the id")
        if ids:
            found = self.get(ids[0])
            if found:
                return found
        raise NotFound(f"no run matches '{ref}'")

    def list_runs(
        self, flt: RunFilter, limit: int = 50, before: tuple[float, str] | None = None
    ) -> list[Row]:
        """Newest first; ``before`` is the (created_at, id) cursor of the last row seen."""
        q = select(runs)
        conds: list[ColumnElement[bool]] = []
        if flt.states:
            conds.append(runs.c.state.in_(list(flt.states)))
        if flt.name:
            conds.append(runs.c.name == flt.name)
        if flt.since is not None:
            conds.append(runs.c.created_at >= flt.since)
        if flt.workspace:
            conds.append(runs.c.workspace == flt.workspace)
        if flt.experiment:
            conds.append(runs.c.experiment_name == flt.experiment)
        if flt.queue:
            conds.append(runs.c.queue == flt.queue)
        if flt.submitter:
            conds.append(runs.c.submitter == flt.submitter)
        if flt.until is not None:
            conds.append(runs.c.created_at < flt.until)
        if flt.text:
            pattern = f"%{_escape_like(flt.text)}%"
            conds.append(or_(*(col.ilike(pattern, escape="\\") for col in _SEARCHED)))
        if flt.visible is not None:
            conds.append(runs.c.workspace.in_(sorted(flt.visible)))
        if before is not None:
            at, rid = before
            conds.append(
                or_(runs.c.created_at < at, and_(runs.c.created_at == at, runs.c.id < rid))
            )
        if conds:
            q = q.where(and_(*conds))
        q = q.order_by(runs.c.created_at.desc(), runs.c.id.desc()).limit(limit)
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(q).mappings()]

    def existing_ids(self, refs: Iterable[str]) -> set[str]:
        """Which of ``refs`` are full run ids (one query, for batch requests)."""
        with self.engine.connect() as conn:
            q = select(runs.c.id).where(runs.c.id.in_(list(refs)))
            return set(conn.execute(q).scalars())

    def in_states(
        self,
        states: Iterable[RunState],
        *,
        light: bool = False,
        scheduling: bool = False,
        ids: Iterable[str] | None = None,
    ) -> list[Row]:
        """Runs in ``states`` in queue order (only those of ``ids``, when given). ``light``
        leaves out the spec texts, the environment and the code and Python records (most
        of a row); ``scheduling`` reads only what a scheduling pass needs of a waiting
        run (the engine reads every queued run at every pass: at a deep queue the rows'
        conversion, not the query, was most of the pass)."""
        columns = _SCHEDULING_COLUMNS if scheduling else _LIGHT_COLUMNS if light else runs.c
        q = (
            select(*columns)
            .where(runs.c.state.in_([s.value for s in states]))
            .order_by(runs.c.queued_seq)
        )
        if ids is not None:
            q = q.where(runs.c.id.in_(sorted(ids)))
        with self.engine.connect() as conn:
            result = conn.execute(q)
            keys = tuple(result.keys())
            return [dict(zip(keys, row, strict=True)) for row in result]

    def gpus_in_use(self) -> set[int]:
        """GPU indices placed on the current attempt of every admitted or running run."""
        return set(self.gpu_holders())

    def gpu_holders(self) -> dict[int, list[str]]:
        """GPU index -> the admitted or running runs whose current attempt holds it."""
        q = (
            select(runs.c.id, attempts.c.placement)
            .join(
                runs,
                and_(
                    runs.c.id == attempts.c.run_id, attempts.c.attempt == runs.c.attempt_count - 1
                ),
            )
            .where(runs.c.state.in_([RunState.ADMITTED.value, RunState.RUNNING.value]))
        )
        held: dict[int, list[str]] = {}
        with self.engine.connect() as conn:
            for run_id, placement in conn.execute(q):
                for index in placement.get("gpus", []):
                    held.setdefault(int(index), []).append(run_id)
        return held

    def events(self, run_id: str) -> list[Row]:
        q = select(events).where(events.c.run_id == run_id).order_by(events.c.id)
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(q).mappings()]

    def attempts(self, run_id: str) -> list[Row]:
        q = select(attempts).where(attempts.c.run_id == run_id).order_by(attempts.c.attempt)
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(q).mappings()]

    def attempt(self, run_id: str, attempt: int) -> Row | None:
        q = select(attempts).where(attempts.c.run_id == run_id, attempts.c.attempt == attempt)
        with self.engine.connect() as conn:
            r = conn.execute(q).mappings().first()
        return dict(r) if r else None

    # -- writes -----------------------------------------------------------------------
    def transition(
        self,
        run_id: str,
        step: Transition,
        *,
        fields: Mapping[str, Any] | None = None,
        new_attempt: Mapping[str, Any] | None = None,
        attempt_update: Mapping[str, Any] | None = None,
    ) -> Row:
        """Move a run to ``step.to`` with an event, atomically and durably.

        Raises :class:`Conflict` when the table forbids the change from the state the run
        is in now (e.g. it finished meanwhile).
        """
        (result,) = self.transition_many([Move(run_id, step, fields, new_attempt, attempt_update)])
        if isinstance(result, TauError):
            raise result
        return result

    def transition_many(self, moves: Sequence[Move]) -> list[Row | TauError]:
        """Many transitions in one durable transaction (one commit, one fsync), in order.

        Each move is a compare-and-set on the state the run is in at that point of the
        batch (a run may move twice in one batch: RUNNING, then SUCCEEDED). A move the
        table forbids, or one that lost a race with another writer, writes nothing and
        is a :class:`Conflict` in its place (a missing run :class:`NotFound`); every
        other move is written with its event, events in the order of ``moves``. Returns
        per move the run as recorded after it (all columns), or the error.
        """
        now = self.clock()
        out: list[Row | TauError] = []
        new_events: list[dict[str, Any]] = []
        with write_transaction(self.engine) as conn:
            ids = list(dict.fromkeys(m.run_id for m in moves))
            rows = {r["id"]: dict(r) for r in conn.execute(_GET_RUNS, {"ids": ids}).mappings()}
            for m in moves:
                cur = rows.get(m.run_id)
                if cur is None:
                    out.append(NotFound(f"no run '{m.run_id}'"))
                    continue
                moved = _move_one(conn, cur, m, now)
                if isinstance(moved, TauError):
                    out.append(moved)
                    continue
                rows[m.run_id] = moved
                new_events.append(_event(m.run_id, now, RunState(cur["state"]), m.step))
                out.append(moved)
            if new_events:
                insert_events(conn, new_events)
        return out

    def cancel_many(self, run_ids: Sequence[str]) -> dict[str, Row | TauError]:
        """Record a cancel for each run in one durable transaction.

        A run that never started becomes ``CANCELLED`` here; one with a process gets
        ``cancel_requested_at`` and the engine stops it; a finished one is a
        :class:`Conflict`. Returns the run as recorded (without the spec texts and the
        environment), or the error, per id.
        """
        now = self.clock()
        out: dict[str, Row | TauError] = {}
        new_events: list[dict[str, Any]] = []
        with write_transaction(self.engine) as conn:
            q = select(*_LIGHT_COLUMNS).where(runs.c.id.in_(list(run_ids)))
            rows = {r["id"]: dict(r) for r in conn.execute(q).mappings()}
            for rid in run_ids:
                if rid in out:
                    continue
                cur = rows.get(rid)
                if cur is None:
                    out[rid] = NotFound(f"no run '{rid}'")
                    continue
                out[rid] = self._cancel_one(conn, cur, now, new_events)
            if new_events:
                insert_events(conn, new_events)
        return out

    def _cancel_one(
        self, conn: Connection, cur: Row, now: float, new_events: list[dict[str, Any]]
    ) -> Row | TauError:
        for _ in range(2):  # a second look when another writer moved the run meanwhile
            state = RunState(cur["state"])
            action = cancel_action(state)
            if action is CancelAction.FINISHED:
                return Conflict(f"run {cur['id']} already {state}")
            if action is CancelAction.SIGNAL:
                if cur["cancel_requested_at"] is not None:
                    return cur
                conn.execute(_REQUEST_CANCEL, {"_id": cur["id"], "at": now})
                return {**cur, "cancel_requested_at": now}
            step = Transition(RunState.CANCELLED, Reason.CANCELLED, "cancelled before start")
            values = {
                "state": step.to.value,
                "reason": step.reason.value,
                "message": step.message,
                "updated_at": now,
                "cancel_requested_at": now,
                "finished_at": now,
            }
            res = conn.execute(
                _update_run(tuple(values)), {**values, "_id": cur["id"], "_from": state.value}
            )
            if res.rowcount == 1:
                new_events.append(_event(cur["id"], now, state, step))
                return {**cur, **values}
            cur = _current(conn, cur["id"])
        return Conflict(f"run {cur['id']} changed state concurrently; retry")

    def resume(self, run_id: str, message: str) -> Row:
        """Take a finished run back to QUEUED, at the back of its queue, as one durable
        change; its next admission starts a new attempt. Conflict unless it finished."""
        now = self.clock()
        with write_transaction(self.engine) as conn:
            cur = _current(conn, run_id)
            frm = RunState(cur["state"])
            if not frm.terminal:
                raise Conflict(f"run {run_id} is {frm}; only a finished run can be resumed")
            step = Transition(RunState.QUEUED, Reason.RESUMED, message)
            seq = int(conn.execute(_MAX_SEQ).scalar() or 0) + 1
            values: dict[str, Any] = {
                "state": step.to.value,
                "reason": step.reason.value,
                "message": message,
                "updated_at": now,
                "queued_seq": seq,
                "finished_at": None,
                "exit_code": None,
                "cancel_requested_at": None,
                "stop_requested_at": None,
                "stop_reason": None,
                "stop_message": None,
                "stop_fault_at": None,
                "flavor": None,
                "next_attempt_at": None,
                "restarts": 0,  # a person asked: the automatic budget starts again
            }
            res = conn.execute(
                _update_run(tuple(values)), {**values, "_id": run_id, "_from": frm.value}
            )
            if res.rowcount != 1:
                raise Conflict(f"run {run_id} changed state concurrently; retry")
            insert_events(conn, _event(run_id, now, frm, step))
        return {**cur, **values}

    def note(self, run_id: str, reason: Reason, message: str) -> None:
        """An event that records something without changing the run's state."""
        now = self.clock()
        with write_transaction(self.engine) as conn:
            cur = _current(conn, run_id)
            state = RunState(cur["state"])
            insert_events(conn, _event(run_id, now, state, Transition(state, reason, message)))

    def update_attempt(self, run_id: str, attempt: int, **values: Any) -> None:
        with write_transaction(self.engine) as conn:
            conn.execute(
                _update_attempt(tuple(values)), {**values, "_id": run_id, "_attempt": attempt}
            )

    def finished_before(self, at: float) -> list[str]:
        """Ids of finished runs that ended before ``at`` (for the retention sweep)."""
        terminal = [s.value for s in RunState if s.terminal]
        q = select(runs.c.id).where(runs.c.state.in_(terminal), runs.c.finished_at < at)
        with self.engine.connect() as conn:
            return list(conn.execute(q).scalars())

    def request_stop(self, run_id: str, stop: StopRequest) -> bool:
        """Record that the control plane stops the run's current attempt, durably, before
        anything is sent. Only a run with an attempt (ADMITTED or RUNNING) and no
        person's cancel can get one; a hardware stop replaces a pending preemption or
        drain (its fault decides where the next attempt resumes), anything else keeps
        the stop already recorded. False when nothing was written."""
        active = [RunState.ADMITTED.value, RunState.RUNNING.value]
        q = (
            update(runs)
            .where(
                runs.c.id == run_id,
                runs.c.state.in_(active),
                runs.c.cancel_requested_at.is_(None),
            )
            .values(
                stop_requested_at=stop.requested_at,
                stop_reason=stop.reason.value,
                stop_message=stop.message,
                stop_fault_at=stop.fault_at,
            )
        )
        if stop.reason is not StopReason.HARDWARE:
            q = q.where(runs.c.stop_reason.is_(None))
        else:
            q = q.where(or_(runs.c.stop_reason.is_(None), runs.c.stop_reason != "hardware"))
        with write_transaction(self.engine) as conn:
            return conn.execute(q).rowcount == 1

    def update_fields(self, run_id: str, **values: Any) -> None:
        with write_transaction(self.engine) as conn:
            conn.execute(update(runs).where(runs.c.id == run_id).values(**values))

    def count(self) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(runs)).scalar() or 0)

    def summary(self) -> list[Row]:
        """Per (state, workspace, queue) present: ``runs``, their ``gpus`` and the oldest
        one's ``created_at``; one grouped read (the metrics' scrape, at any store size)."""
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(_SUMMARY).mappings()]


# Statements built once: building them per call (30 columns of coercion and cache-key work)
# cost ten times the commit itself.
_SUMMARY = select(
    runs.c.state,
    runs.c.workspace,
    runs.c.queue,
    func.count().label("runs"),
    func.coalesce(func.sum(runs.c.gpus), 0).label("gpus"),
    func.min(runs.c.created_at).label("created_at"),
).group_by(runs.c.state, runs.c.workspace, runs.c.queue)
_MAX_SEQ = select(func.coalesce(func.max(runs.c.queued_seq), 0))
_INSERT_RUN = insert(runs)
_INSERT_ATTEMPT = insert(attempts)
_GET_RUN = select(runs).where(runs.c.id == bindparam("rid"))
_GET_RUNS = select(runs).where(runs.c.id.in_(bindparam("ids", expanding=True)))
_GET_ID = select(runs.c.id).where(runs.c.id == bindparam("rid"))
_REQUEST_CANCEL = (
    update(runs).where(runs.c.id == bindparam("_id")).values(cancel_requested_at=bindparam("at"))
)
_EMPTY_RUN: Row = {c.name: None for c in runs.c}
_HEAVY = frozenset(
    {
        "spec_source",
        "spec_file_text",
        "spec_overrides",
        "spec_resolved",
        "env_summary",
        "code_info",  # a git diff of up to 1 MiB
        "python_env",  # every installed package
    }
)
_LIGHT_COLUMNS = [c for c in runs.c if c.name not in _HEAVY]
# What the engine's scheduling pass reads of a queued run (``queueing.workload_of``, the
# admission), and what identifies the row.
_SCHEDULING_COLUMNS = [
    runs.c[name]
    for name in (
        "id",
        "name",
        "workspace",
        "submitter",
        "state",
        "cluster_queue",
        "priority_value",
        "requests",
        "gpus",
        "gpu_type",
        "created_at",
        "updated_at",
        "queued_seq",
        "attempt_count",
        "flavor",
        "stop_requested_at",
        "cancel_requested_at",
    )
]


@functools.cache
def _update_run(columns: tuple[str, ...]) -> Update:
    """UPDATE of these columns, guarded by the state read in the same transaction."""
    return (
        update(runs)
        .where(runs.c.id == bindparam("_id"), runs.c.state == bindparam("_from"))
        .values({c: bindparam(c) for c in columns})
    )


@functools.cache
def _update_attempt(columns: tuple[str, ...]) -> Update:
    return (
        update(attempts)
        .where(attempts.c.run_id == bindparam("_id"), attempts.c.attempt == bindparam("_attempt"))
        .values({c: bindparam(c) for c in columns})
    )


_Step = tuple[RunState | None, Transition]


def _new_run_values(
    row: Mapping[str, Any], steps: Sequence[Transition], now: float
) -> tuple[dict[str, Any], list[_Step]]:
    """The columns of a new run and its checked first transitions."""
    values = dict(row)
    # Never a NULL owner with a key: NULLs are distinct in the unique index. Both columns
    # are always present so a batch inserts rows of one shape.
    keyed = bool(values.get("idempotency_key"))
    values["idempotency_owner"] = values.get("idempotency_owner") or (
        values["submitter"] if keyed else None
    )
    values.setdefault("request_hash", None)
    state: RunState | None = None
    log: list[_Step] = []
    for step in steps:
        if state is not None:
            check_transition(state, step.to)
        log.append((state, step))
        state = step.to
    assert state is not None, "a run needs at least one transition"
    values.update(
        state=state.value,
        reason=steps[-1].reason.value,
        message=steps[-1].message,
        created_at=now,
        updated_at=now,
        attempt_count=0,
    )
    return values, log


def _key_scope(run: Mapping[str, Any]) -> tuple[str, str, str]:
    """Whose key it is: (owner, workspace, key); runs recorded before owners were kept
    (migration 0005 fills them in) belong to their submitter."""
    owner = run.get("idempotency_owner") or run["submitter"]
    return (owner, run["workspace"], run["idempotency_key"])


def _different_requests(first: Mapping[str, Any], again: Mapping[str, Any]) -> bool:
    # A run recorded without a request hash (before migration 0005) matches any request.
    a, b = first.get("request_hash"), again.get("request_hash")
    return a is not None and b is not None and a != b


def _current(conn: Connection, run_id: str) -> Row:
    r = conn.execute(_GET_RUN, {"rid": run_id}).mappings().first()
    if r is None:
        raise NotFound(f"no run '{run_id}'")
    return dict(r)


def _move_one(conn: Connection, cur: Row, m: Move, now: float) -> Row | TauError:
    """Write one move (run row, attempt rows; not its event) if the state still allows it.

    The guarded UPDATE comes first: when it matches no row (another writer moved the run
    since ``cur`` was read) nothing of the move has been written."""
    frm = RunState(cur["state"])
    if m.step.to not in allowed_targets(frm):
        return Conflict(f"run {m.run_id} is {frm}; it cannot become {m.step.to}")
    values: dict[str, Any] = dict(m.fields or {})
    values.update(
        state=m.step.to.value, reason=m.step.reason.value, message=m.step.message, updated_at=now
    )
    if m.new_attempt is not None:
        values["attempt_count"] = cur["attempt_count"] + 1
    res = conn.execute(_update_run(tuple(values)), {**values, "_id": m.run_id, "_from": frm.value})
    if res.rowcount != 1:
        return Conflict(f"run {m.run_id} changed state concurrently; retry")
    if m.new_attempt is not None:
        conn.execute(
            _INSERT_ATTEMPT,
            {
                "run_id": m.run_id,
                "attempt": cur["attempt_count"],
                "created_at": now,
                **m.new_attempt,
            },
        )
    if m.attempt_update:  # the attempt that was current when the move began
        conn.execute(
            _update_attempt(tuple(m.attempt_update)),
            {**m.attempt_update, "_id": m.run_id, "_attempt": cur["attempt_count"] - 1},
        )
    return {**cur, **values}


def _event(run_id: str, at: float, frm: RunState | None, step: Transition) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "at": at,
        "from_state": frm.value if frm else None,
        "to_state": step.to.value,
        "reason": step.reason.value,
        "message": step.message,
    }


# What RunFilter.text searches (ILIKE: lower() on both sides in SQLite, ILIKE in PostgreSQL;
# a NULL experiment matches nothing there).
_SEARCHED = (runs.c.id, runs.c.name, runs.c.experiment_name, runs.c.submitter, runs.c.message)


def _escape_like(s: str) -> str:
    return s.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
