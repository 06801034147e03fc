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

from taugrid.domain.states import Reason, RunState, allowed_targets, check_transition
from taugrid.errors import Ambiguous, Conflict, NotFound
from taugrid.store.db import write_transaction
from taugrid.store.tables import attempts, events, runs

Row = dict[str, Any]


@dataclass(frozen=True)
class Transition:
    to: RunState
    reason: Reason
    message: str


@dataclass(frozen=True)
class RunFilter:
    states: Sequence[str] = ()
    name: str | None = None
    since: float | None = None
    workspace: str | None = None


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
        now = self.clock()
        values = dict(row)
        state: RunState | None = None
        log = []
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
        try:
            with write_transaction(self.engine) as conn:
                seq = conn.execute(_MAX_SEQ).scalar()
                values["queued_seq"] = int(seq or 0) + 1
                conn.execute(_INSERT_RUN, values)
                conn.execute(_INSERT_EVENT, [_event(values["id"], now, frm, s) for frm, s in log])
        except IntegrityError:
            key = values.get("idempotency_key")
            if key is None:
                raise
            existing = self._by_key(key)
            if existing is None:
                raise
            return existing, False
        return {**_EMPTY_RUN, **values}, True

    def _by_key(self, key: str) -> Row | None:
        with self.engine.connect() as conn:
            r = conn.execute(select(runs).where(runs.c.idempotency_key == key)).mappings().first()
        return dict(r) if r else None

    # -- reads ------------------------------------------------------------------------
    def get(self, run_id: str) -> Row | None:
        with self.engine.connect() as conn:
            r = conn.execute(_GET_RUN, {"rid": run_id}).mappings().first()
        return dict(r) if r else None

    def resolve(self, ref: str) -> Row:
        """Find a run by full id, name (the most recent run of it), or unique id prefix."""
        with self.engine.connect() as conn:
            exact = conn.execute(select(runs).where(runs.c.id == ref)).mappings().first()
            if exact:
                return dict(exact)
            # A name beats a prefix: `tau logs train` means the latest run named train.
            by_name = (
                conn.execute(
                    select(runs)
                    .where(runs.c.name == ref)
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
                conn.execute(select(runs.c.id).where(runs.c.id.like(prefix, escape="\\")).limit(6))
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

    def in_states(self, states: Iterable[RunState]) -> list[Row]:
        q = (
            select(runs)
            .where(runs.c.state.in_([s.value for s in states]))
            .order_by(runs.c.queued_seq)
        )
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(q).mappings()]

    def gpus_in_use(self) -> set[int]:
        """GPU indices placed on the current attempt of every admitted or running run."""
        q = (
            select(attempts.c.placement)
            .join(
                runs,
                and_(
                    runs.c.id == attempts.c.run_id, attempts.c.attempt == runs.c.attempt_count - 1
                ),
            )
            .where(runs.c.state.in_([RunState.ADMITTED.value, RunState.RUNNING.value]))
        )
        used: set[int] = set()
        with self.engine.connect() as conn:
            for (placement,) in conn.execute(q):
                used.update(placement.get("gpus", []))
        return used

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
        now = self.clock()
        with write_transaction(self.engine) as conn:
            cur = _current(conn, run_id)
            frm = RunState(cur["state"])
            if step.to not in allowed_targets(frm):
                raise Conflict(f"run {run_id} is {frm}; it cannot become {step.to}")
            values: dict[str, Any] = dict(fields or {})
            values.update(
                state=step.to.value, reason=step.reason.value, message=step.message, updated_at=now
            )
            if new_attempt is not None:
                values["attempt_count"] = cur["attempt_count"] + 1
                conn.execute(
                    _INSERT_ATTEMPT,
                    {
                        "run_id": run_id,
                        "attempt": cur["attempt_count"],
                        "created_at": now,
                        **new_attempt,
                    },
                )
            res = conn.execute(
                _update_run(tuple(values)), {**values, "_id": run_id, "_from": frm.value}
            )
            if res.rowcount != 1:  # lost a race with another writer: nothing written
                raise Conflict(f"run {run_id} changed state concurrently; retry")
            if attempt_update:
                conn.execute(
                    _update_attempt(tuple(attempt_update)),
                    {**attempt_update, "_id": run_id, "_attempt": cur["attempt_count"] - 1},
                )
            conn.execute(_INSERT_EVENT, _event(run_id, now, frm, step))
        return {**cur, **values}

    def update_fields(self, run_id: str, **values: Any) -> None:
        with write_transaction(self.engine) as conn:
            conn.execute(update(runs).where(runs.c.id == run_id).values(**values))

    def count(self) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(runs)).scalar() or 0)


# Statements built once: building them per call (30 columns of coercion and cache-key work)
# cost ten times the commit itself.
_MAX_SEQ = select(func.coalesce(func.max(runs.c.queued_seq), 0))
_INSERT_RUN = insert(runs)
_INSERT_EVENT = insert(events)
_INSERT_ATTEMPT = insert(attempts)
_GET_RUN = select(runs).where(runs.c.id == bindparam("rid"))
_EMPTY_RUN: Row = {c.name: None for c in runs.c}


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


def _current(conn: Connection, run_id: str) -> Row:
    r = conn.execute(_GET_RUN, {"rid": run_id}).mappings().first()
    if r is None:
        raise NotFound(f"no run '{run_id}'")
    return dict(r)


def _event(run_id: str, at: float, frm: RunState | None, step: Transition) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "at": at,
        "from_state": frm.value if frm else None,
        "to_state": step.to.value,
        "reason": step.reason.value,
        "message": step.message,
    }


def _escape_like(s: str) -> str:
    return s.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
