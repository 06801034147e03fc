"""Durable state transitions per second through the API, against raw SQLite commits/s.

Baseline: in this process, a SQLite file in the server's TAU_HOME (same disk), WAL mode,
``synchronous=FULL`` (as the server), one single-row INSERT of an event-shaped row per
transaction, for 2 s. fsync speed swings with other I/O on the machine, so the baseline is
measured side by side with the API: before the first phase, between phases and after the
last; each phase is compared with the mean of the two baseline runs around it.

API: a server with ``--gpus 1`` whose GPU a long ``sleep`` holds. K concurrent clients
(K = 1, 8, 32; one keep-alive connection each) loop for 5 s over: submit a run asking for
one GPU (one request, one commit, two event rows: -> PENDING, PENDING -> QUEUED), then
cancel it while it is QUEUED (one request, one commit, one event row: QUEUED ->
CANCELLED). Transitions are counted from the database file itself (``SELECT count(*) FROM
events``, opened read-only) before and after each phase, checked against what the clients
did, and the events of sampled runs are checked through GET /api/v1/runs/{id}.
"""

from __future__ import annotations

import sqlite3
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from bench._common import (
    TERMINAL,
    BenchServer,
    count_events,
    headline,
    hold_gpu,
    print_headlines,
    submit_body,
    upload_snapshot,
    wait_state,
    write_results,
)

NAME = "transitions"
RAW_SECONDS = 2.0
PHASE_SECONDS = 5.0
CONCURRENCY = (1, 8, 32)
TARGET = 0.25
SAMPLES = 5  # runs per phase whose events are checked through the API


def raw_commits_per_s(path: Path, seconds: float = RAW_SECONDS) -> dict[str, Any]:
    """One single-row INSERT per transaction, WAL + synchronous=FULL, for ``seconds``."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        conn.execute("PRAGMA synchronous=FULL")
        sync = conn.execute("PRAGMA synchronous").fetchone()[0]
        conn.execute(
            "CREATE TABLE events (id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, at REAL NOT NULL,"
            " from_state TEXT, to_state TEXT NOT NULL, reason TEXT NOT NULL, message TEXT NOT NULL)"
        )
        row = ("bench-abcde", 0.0, "QUEUED", "CANCELLED", "Cancelled", "cancelled before start")
        n = 0
        t0 = time.perf_counter()
        deadline = t0 + seconds
        while time.perf_counter() < deadline:
            conn.execute("BEGIN")
            conn.execute(
                "INSERT INTO events (run_id, at, from_state, to_state, reason, message)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                row,
            )
            conn.execute("COMMIT")
            n += 1
        elapsed = time.perf_counter() - t0
    finally:
        conn.close()
    assert mode == "wal" and sync == 2, (mode, sync)  # 2 == FULL
    return {"commits": n, "seconds": round(elapsed, 3), "commits_per_s": round(n / elapsed, 1)}


def api_phase(srv: BenchServer, body: dict[str, Any], k: int) -> dict[str, Any]:
    clients = [srv.api() for _ in range(k)]
    for c in clients:  # connect before the clock starts
        c.request("GET", "/api/v1/runs?limit=1")
    before = count_events(srv.db_path)
    start = threading.Barrier(k + 1)
    submits = [0] * k
    cancels = [0] * k
    ids: list[list[str]] = [[] for _ in range(k)]
    errors: list[str] = []
    stop_at = [0.0]

    def worker(i: int) -> None:
        c = clients[i]
        start.wait()
        while time.perf_counter() < stop_at[0]:
            try:
                rid = c.submit(body, str(uuid.uuid4()))["run"]["id"]
                submits[i] += 1
                c.cancel(rid)
                cancels[i] += 1
                ids[i].append(rid)
            except Exception as exc:
                errors.append(repr(exc))
                return

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(k)]
    for t in threads:
        t.start()
    stop_at[0] = time.perf_counter() + PHASE_SECONDS
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    after = count_events(srv.db_path)
    all_ids = [r for part in ids for r in part]
    checked = 0
    for rid in all_ids[:: max(1, len(all_ids) // SAMPLES)][:SAMPLES]:
        run = clients[0].get_run(rid)
        got = [(e["from_state"], e["to_state"]) for e in run["events"]]
        want = [(None, "PENDING"), ("PENDING", "QUEUED"), ("QUEUED", "CANCELLED")]
        if got != want or run["state"] != "CANCELLED":
            errors.append(f"{rid}: events {got}, state {run['state']}")
        checked += 1
    for c in clients:
        c.close()
    n_sub, n_can = sum(submits), sum(cancels)
    transitions = after - before
    expected = 2 * n_sub + n_can
    if transitions != expected:
        errors.append(f"events table grew by {transitions}, clients expect {expected}")
    return {
        "clients": k,
        "seconds": round(elapsed, 3),
        "submits": n_sub,
        "cancels": n_can,
        "requests_per_s": round((n_sub + n_can) / elapsed, 1),
        "event_rows_written": transitions,
        "transitions_per_s": round(transitions / elapsed, 1),
        "runs_checked_via_api": checked,
        "errors": errors[:10],
    }


def main() -> dict[str, Any]:
    with BenchServer(NAME, gpus=1) as srv:
        raw_path = srv.home / "raw-baseline.db"
        api = srv.api()
        digest = upload_snapshot(api)
        holder = hold_gpu(api, digest, srv.home)
        body = submit_body(["true"], digest, srv.home, ["resources.gpus=1", "name=cycle"])
        print(f"{NAME}: raw SQLite baseline ({RAW_SECONDS:.0f} s) ...", flush=True)
        raws = [raw_commits_per_s(raw_path)]
        phases = []
        for k in CONCURRENCY:
            print(
                f"{NAME}: {k} client(s), submit+cancel cycles for {PHASE_SECONDS:.0f} s, "
                "then the raw baseline again ...",
                flush=True,
            )
            phases.append(api_phase(srv, body, k))
            raws.append(raw_commits_per_s(raw_path))
        api.cancel(holder)
        wait_state(api, holder, TERMINAL)
        api.close()
    for i, p in enumerate(phases):
        raw = (raws[i]["commits_per_s"] + raws[i + 1]["commits_per_s"]) / 2
        p["raw_commits_per_s_around"] = round(raw, 1)
        p["transitions_over_raw_commits"] = round(p["transitions_per_s"] / raw, 3)
        p["commits_over_raw_commits"] = round(p["requests_per_s"] / raw, 3)
    rows = [
        headline(
            f"transitions/s / raw commits/s (K={p['clients']})",
            p["transitions_over_raw_commits"],
            target=f">= {TARGET}",
            ok=p["transitions_over_raw_commits"] >= TARGET and not p["errors"],
        )
        for p in phases
    ]
    result = {
        "raw_sqlite": {
            "runs": raws,
            "settings": "WAL, synchronous=FULL, 1 single-row INSERT per transaction",
            "note": "run before the first phase, between phases and after the last",
        },
        "phases": phases,
        "targets": {"transitions_over_raw_commits": TARGET},
        "headlines": rows,
    }
    path = write_results(NAME, result)
    print(
        "  raw SQLite (WAL, FULL), commits/s: "
        + ", ".join(f"{r['commits_per_s']:,.0f}" for r in raws)
    )
    for p in phases:
        print(
            f"  K={p['clients']:>2} (raw {p['raw_commits_per_s_around']:,.0f}/s): "
            f"{p['requests_per_s']:7.1f} req/s (= commits/s, "
            f"x{p['commits_over_raw_commits']:.3f} raw)  {p['transitions_per_s']:7.1f} "
            f"transitions/s  (x{p['transitions_over_raw_commits']:.3f} raw)"
            + (f"  ERRORS: {p['errors']}" if p["errors"] else "")
        )
    print_headlines(rows)
    print(f"  results: {path}")
    return result


if __name__ == "__main__":
    main()
    sys.exit(0)
