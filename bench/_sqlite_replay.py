"""Raw SQLite commits that write exactly what the API's requests write: the baseline of
``bench.transitions``.

:func:`capture` reads, from the server's own database file (read-only), the rows that one
submit request and one cancel request of a given shape wrote: the run rows as inserted,
their event rows, the columns the cancel changed, and the audit rows. :class:`Replayer`
then writes the same rows, with fresh ids and keys, into a database with the server's own
schema (every table and index, copied from ``sqlite_master``), WAL, ``synchronous=FULL``
and ``foreign_keys=ON`` as the server sets them, in the same commits per request as the
API makes today (``RunStore.create_runs`` / ``cancel_many``: run rows and events in one
transaction; ``audited()``: the audit row in a second one). No SQLAlchemy, no reads, no
validation: the floor for writing those rows durably, one request's commits at a time.

Stdlib only, so the bare ASGI baseline (``bench._bare_asgi``) uses it too.
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# Columns given fresh values per replayed run; all others are copied as stored.
_FRESH_RUN_COLUMNS = ("id", "idempotency_key", "queued_seq", "created_at", "updated_at")


@dataclass
class Template:
    """What one submit request and one cancel request of B runs wrote."""

    schema: list[str]  # CREATE TABLE / CREATE INDEX statements, in creation order
    runs: list[dict[str, Any]]  # the B run rows as the submit inserted them
    submit_events: list[dict[str, Any]]  # their events (run_id names a row of ``runs``)
    submit_audit: list[dict[str, Any]]
    cancel_sets: list[dict[str, Any]]  # per run: the columns the cancel changed, new values
    cancel_events: list[dict[str, Any]]
    cancel_audit: list[dict[str, Any]]

    @property
    def runs_per_request(self) -> int:
        return len(self.runs)

    @property
    def transitions_per_cycle(self) -> int:
        return len(self.submit_events) + len(self.cancel_events)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Template:
        return cls(**json.loads(text))


def _ro(db: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    conn.row_factory = sqlite3.Row
    return conn


def marks(db: Path) -> tuple[int, int]:
    """(max event id, max audit id) now: rows after these are the next request's."""
    conn = _ro(db)
    try:
        ev = conn.execute("SELECT coalesce(max(id), 0) FROM events").fetchone()[0]
        au = conn.execute("SELECT coalesce(max(id), 0) FROM audit").fetchone()[0]
        return int(ev), int(au)
    finally:
        conn.close()


def read_rows(db: Path, run_ids: list[str], since: tuple[int, int]) -> dict[str, Any]:
    """The runs ``run_ids`` now, and their events and all audit rows after ``since``."""
    conn = _ro(db)
    try:
        marks_q = ",".join("?" * len(run_ids))
        runs = {
            r["id"]: dict(r)
            for r in conn.execute(f"SELECT * FROM runs WHERE id IN ({marks_q})", run_ids)
        }
        events = [
            {k: v for k, v in dict(r).items() if k != "id"}
            for r in conn.execute(
                f"SELECT * FROM events WHERE id > ? AND run_id IN ({marks_q}) ORDER BY id",
                [since[0], *run_ids],
            )
        ]
        audit = [
            {k: v for k, v in dict(r).items() if k != "id"}
            for r in conn.execute("SELECT * FROM audit WHERE id > ? ORDER BY id", [since[1]])
        ]
        return {"runs": [runs[i] for i in run_ids], "events": events, "audit": audit}
    finally:
        conn.close()


def schema_of(db: Path) -> list[str]:
    conn = _ro(db)
    try:
        return [
            sql
            for (sql,) in conn.execute(
                "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%'"
                " ORDER BY rowid"
            )
        ]
    finally:
        conn.close()


def capture(db: Path, submitted: dict[str, Any], cancelled: dict[str, Any]) -> Template:
    """A template from :func:`read_rows` right after a submit and right after the cancel
    of the same runs (each read with the marks taken just before its request)."""
    before = submitted["runs"]
    after = cancelled["runs"]
    sets = [
        {k: v for k, v in a.items() if b.get(k) != v and k not in _FRESH_RUN_COLUMNS}
        for b, a in zip(before, after, strict=True)
    ]
    return Template(
        schema=schema_of(db),
        runs=before,
        submit_events=submitted["events"],
        submit_audit=submitted["audit"],
        cancel_sets=sets,
        cancel_events=cancelled["events"],
        cancel_audit=cancelled["audit"],
    )


class Replayer:
    """Writes a template's rows again and again into a fresh database at ``path``.

    One connection, so one thread at a time (the bare ASGI server serializes writers on a
    lock, as the server's ``write_transaction`` does)."""

    def __init__(self, path: Path, template: Template) -> None:
        self.t = template
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        mode = self.conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        self.conn.execute("PRAGMA synchronous=FULL")
        self.conn.execute("PRAGMA foreign_keys=ON")
        self.conn.execute("PRAGMA busy_timeout=30000")
        sync = self.conn.execute("PRAGMA synchronous").fetchone()[0]
        assert mode == "wal" and sync == 2, (mode, sync)  # 2 == FULL
        for sql in template.schema:
            self.conn.execute(sql)
        self.run_cols = list(template.runs[0])
        self.event_cols = list(template.submit_events[0])
        self.audit_cols = list((template.submit_audit or template.cancel_audit or [{}])[0])
        self._seq = 0
        self._n = 0
        self.commits = 0
        self.transitions = 0

    @staticmethod
    def _insert(table: str, cols: list[str]) -> str:
        return f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"

    def _fresh_id(self, template_id: str) -> str:
        """Same length as the API's id (name + '-' + 5 characters) where the counter fits."""
        self._n += 1
        base = template_id.rsplit("-", 1)[0]
        return f"{base}-{self._n:05x}"

    def _events(
        self, template: list[dict[str, Any]], ids: dict[str, str], now: float
    ) -> list[list[Any]]:
        fresh = {"at": now}
        return [
            [ids[e[c]] if c == "run_id" else fresh.get(c, e[c]) for c in self.event_cols]
            for e in template
        ]

    def _audit(self, rows: list[dict[str, Any]], now: float) -> None:
        if not rows:
            return
        self.conn.execute("BEGIN")
        self.conn.executemany(
            self._insert("audit", self.audit_cols),
            [[now if c == "at" else r[c] for c in self.audit_cols] for r in rows],
        )
        self.conn.execute("COMMIT")
        self.commits += 1

    def submit(self) -> list[str]:
        """The submit request's commits: run rows and events, then the audit row."""
        now = time.time()
        ids = {r["id"]: self._fresh_id(r["id"]) for r in self.t.runs}
        rows = []
        for r in self.t.runs:
            self._seq += 1
            fresh = {
                "id": ids[r["id"]],
                "idempotency_key": str(uuid.uuid4()) if r.get("idempotency_key") else None,
                "queued_seq": self._seq,
                "created_at": now,
                "updated_at": now,
            }
            rows.append([fresh[c] if c in fresh else r[c] for c in self.run_cols])
        events = self._events(self.t.submit_events, ids, now)
        self.conn.execute("BEGIN")
        self.conn.executemany(self._insert("runs", self.run_cols), rows)
        self.conn.executemany(self._insert("events", self.event_cols), events)
        self.conn.execute("COMMIT")
        self.commits += 1
        self.transitions += len(events)
        self._audit(self.t.submit_audit, now)
        return list(ids.values())

    def cancel(self, run_ids: list[str]) -> None:
        """The cancel request's commits: a compare-and-set UPDATE per run and its event,
        then the audit row."""
        now = time.time()
        by_template = dict(zip((r["id"] for r in self.t.runs), run_ids, strict=True))
        self.conn.execute("BEGIN")
        for rid, before, sets in zip(run_ids, self.t.runs, self.t.cancel_sets, strict=True):
            values = {k: (now if isinstance(v, float) else v) for k, v in sets.items()}
            assign = ", ".join(f"{k} = ?" for k in values)
            cur = self.conn.execute(
                f"UPDATE runs SET {assign}, updated_at = ? WHERE id = ? AND state = ?",
                [*values.values(), now, rid, before["state"]],
            )
            assert cur.rowcount == 1, rid
        events = self._events(self.t.cancel_events, by_template, now)
        self.conn.executemany(self._insert("events", self.event_cols), events)
        self.conn.execute("COMMIT")
        self.commits += 1
        self.transitions += len(events)
        self._audit(self.t.cancel_audit, now)

    def cycle(self) -> None:
        self.cancel(self.submit())

    def close(self) -> None:
        self.conn.close()
