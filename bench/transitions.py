"""Durable state transitions per second through the API, against baselines that write the
same rows in the same commits.

A server with ``--gpus 1`` whose GPU a long ``sleep`` holds. Clients loop over *submit* a
run asking for that GPU (it stays QUEUED: events ``-> PENDING`` and ``PENDING -> QUEUED``)
and *cancel* it (``QUEUED -> CANCELLED``): three durable transitions per run. Each mutation
request makes two commits today: the run rows with their events, then the audit row.

Two request shapes, each against its own like-for-like baseline:

* **batch** (K = 1, 4 clients): ``POST /api/v1/runs/batch`` of B = 100 runs, then
  ``POST /api/v1/runs/cancel`` of those 100: two requests, four commits, 300 transitions.
  Baseline: raw SQLite in this process replaying exactly those commits (``_sqlite_replay``:
  the rows one batch request and one cancel request wrote, read back from the server's
  database file, written again with fresh ids into a database with the server's schema,
  WAL, ``synchronous=FULL``, ``foreign_keys=ON``, one commit per API commit). Ratio = API
  transitions/s / replay transitions/s: the share of the bare write cost that reaches the
  API; 1.0 would mean the API adds nothing to the commits.
* **single** (K = 1, 8, 32 clients): one run per request (``POST /api/v1/runs``, then
  ``POST /api/v1/runs/{id}/cancel``). Baseline: the same clients, the same request bodies
  and the same uvicorn against ``bench._bare_asgi``, a plain ASGI callable that makes the
  same commits per request (replayed from the rows a single submit and a single cancel
  wrote). Ratio = API transitions/s / bare transitions/s: what routing, validation, auth
  and the service logic cost on top of HTTP and the commits.

fsync speed on a shared VM swings by 10x within a minute, so each phase interleaves
``SLICES`` slices of the API with ``SLICES`` of its baseline, alternating which goes first;
the headline is the ratio of the summed rates, and the per-slice-pair ratios give the
spread. Transitions are counted in the database files themselves (``SELECT count(*) FROM
events``, opened read-only) and checked against 3 x the runs the clients cycled; the
events of sampled runs are checked through ``GET /api/v1/runs/{id}``. Also recorded, for
scale only: raw single-row commits/s on the same disk (the old, mixed baseline).
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench._bare_asgi import BareServer
from bench._common import (
    TERMINAL,
    Api,
    BenchServer,
    count_events,
    headline,
    hold_gpu,
    print_headlines,
    raw_commits_per_s,
    submit_body,
    upload_snapshot,
    wait_state,
    write_results,
)
from bench._sqlite_replay import Replayer, Template, capture, marks, read_rows

NAME = "transitions"
SLICES = 5
SLICE_S = 1.0
CONCURRENCY = (1, 8, 32)
BATCH = 100  # runs per batch request
BATCH_CONCURRENCY = (1, 4)
TARGET = 0.25
SAMPLES = 5  # runs per phase whose events are checked through the API


class Clients:
    """K threads doing submit+cancel cycles while ``running``; parked otherwise."""

    def __init__(self, make_api: Callable[[], Api], body: dict[str, Any], k: int, batch: int = 0):
        self.body = body
        self.batch = batch  # 0: one run per request; B: B runs per request
        self.apis = [make_api() for _ in range(k)]
        for api in self.apis:  # connect before any clock starts
            api.request("GET", "/api/v1/runs?limit=1")
        self.cond = threading.Condition()
        self.running = False
        self.stopping = False
        self.active = 0
        self.cycles = 0
        self.ids: list[str] = []
        self.errors: list[str] = []
        self.threads = [threading.Thread(target=self._work, args=(a,)) for a in self.apis]
        for t in self.threads:
            t.start()

    def _work(self, api: Api) -> None:
        while True:
            with self.cond:
                while not self.running and not self.stopping:
                    self.cond.wait()
                if self.stopping:
                    return
                self.active += 1
            try:
                rids = cycle(api, self.body, self.batch)
                ok = True
            except Exception as exc:
                self.errors.append(repr(exc))
                ok = False
            with self.cond:
                self.active -= 1
                if ok:
                    self.cycles += len(rids)
                    self.ids.extend(rids)
                self.cond.notify_all()
            if not ok:
                return

    def run_for(self, seconds: float) -> float:
        """Let the clients cycle for ``seconds``; returns the time until the last cycle
        they had started finished."""
        t0 = time.perf_counter()
        with self.cond:
            self.running = True
            self.cond.notify_all()
        time.sleep(seconds)
        with self.cond:
            self.running = False
            while self.active:
                self.cond.wait()
        return time.perf_counter() - t0

    def close(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify_all()
        for t in self.threads:
            t.join()
        for api in self.apis:
            api.close()


def cycle(api: Api, body: dict[str, Any], batch: int) -> list[str]:
    """One submit request and one cancel request; the run ids."""
    if not batch:
        rid: str = api.submit(body, str(uuid.uuid4()))["run"]["id"]
        api.cancel(rid)
        return [rid]
    items = [{**body, "idempotency_key": str(uuid.uuid4())} for _ in range(batch)]
    out = api.request("POST", "/api/v1/runs/batch", json_body={"runs": items})
    rids = [r["run"]["id"] for r in out["results"]]
    answers = api.request("POST", "/api/v1/runs/cancel", json_body={"runs": rids})
    bad = [a for a in answers["results"] if a["error"] or a["run"]["state"] != "CANCELLED"]
    if bad:
        raise RuntimeError(f"cancel answers: {bad[:3]}")
    return rids


def capture_template(srv: BenchServer, api: Api, body: dict[str, Any], batch: int) -> Template:
    """Run one submit request and one cancel request of this shape and read back, from the
    server's database, every row each of them wrote."""
    db = srv.db_path
    before_submit = marks(db)
    if batch:
        items = [{**body, "idempotency_key": str(uuid.uuid4())} for _ in range(batch)]
        out = api.request("POST", "/api/v1/runs/batch", json_body={"runs": items})
        ids = [r["run"]["id"] for r in out["results"]]
    else:
        ids = [api.submit(body, str(uuid.uuid4()))["run"]["id"]]
    submitted = read_rows(db, ids, before_submit)
    before_cancel = marks(db)
    if batch:
        api.request("POST", "/api/v1/runs/cancel", json_body={"runs": ids})
    else:
        api.cancel(ids[0])
    template = capture(db, submitted, read_rows(db, ids, before_cancel))
    n = len(ids)
    assert len(template.submit_events) == 2 * n and len(template.cancel_events) == n, (
        "the API no longer writes 2 + 1 events per run: update the benchmark"
    )
    return template


class Slices:
    """Alternating timed slices of two contenders; rates and per-pair ratios."""

    def __init__(self) -> None:
        self.api: list[tuple[int, float]] = []  # (transitions, seconds) per slice
        self.base: list[tuple[int, float]] = []

    def summary(self) -> dict[str, Any]:
        api_rate = sum(n for n, _ in self.api) / sum(s for _, s in self.api)
        base_rate = sum(n for n, _ in self.base) / sum(s for _, s in self.base)
        pairs = [(a / sa) / (b / sb) for (a, sa), (b, sb) in zip(self.api, self.base, strict=True)]
        return {
            "api_transitions_per_s": round(api_rate, 1),
            "baseline_transitions_per_s": round(base_rate, 1),
            "ratio": round(api_rate / base_rate, 4),
            "ratio_per_slice_pair": {
                "median": round(statistics.median(pairs), 4),
                "min": round(min(pairs), 4),
                "max": round(max(pairs), 4),
            },
            "api_slices": self.api,
            "baseline_slices": self.base,
        }


def check_runs(api: Api, ids: list[str], errors: list[str]) -> int:
    step = max(1, len(ids) // SAMPLES)
    want = [(None, "PENDING"), ("PENDING", "QUEUED"), ("QUEUED", "CANCELLED")]
    checked = 0
    for rid in ids[::step][:SAMPLES]:
        run = api.get_run(rid)
        got = [(e["from_state"], e["to_state"]) for e in run["events"]]
        if got != want or run["state"] != "CANCELLED":
            errors.append(f"{rid}: events {got}, state {run['state']}")
        checked += 1
    return checked


def timed_api_slice(clients: Clients, db: Path) -> tuple[int, float]:
    before = count_events(db)
    seconds = clients.run_for(SLICE_S)
    return count_events(db) - before, seconds


def single_phase(
    srv: BenchServer, bare: BareServer, body: dict[str, Any], k: int
) -> dict[str, Any]:
    api_clients = Clients(srv.api, body, k)
    bare_clients = Clients(bare.api, body, k)
    slices = Slices()
    try:
        for i in range(SLICES):
            for side in ("api", "bare") if i % 2 == 0 else ("bare", "api"):
                if side == "api":
                    slices.api.append(timed_api_slice(api_clients, srv.db_path))
                else:
                    slices.base.append(timed_api_slice(bare_clients, bare.db_path))
        errors = api_clients.errors + [f"bare: {e}" for e in bare_clients.errors]
        checked = check_runs(api_clients.apis[0], api_clients.ids, errors)
    finally:
        api_clients.close()
        bare_clients.close()
    for who, clients, got in (
        ("API", api_clients, slices.api),
        ("bare", bare_clients, slices.base),
    ):
        rows = sum(n for n, _ in got)
        if rows != 3 * clients.cycles:
            want = 3 * clients.cycles
            errors.append(f"{who}: events grew by {rows}; {clients.cycles} cycles make {want}")
    api_seconds = sum(s for _, s in slices.api)
    return {
        "shape": "single",
        "clients": k,
        "baseline": "bare ASGI endpoint, same uvicorn, same commits per request",
        "cycles": api_clients.cycles,
        "requests_per_s": round(2 * api_clients.cycles / api_seconds, 1),
        "commits_per_request": 2,
        "baseline_requests_per_s": round(
            2 * bare_clients.cycles / sum(s for _, s in slices.base), 1
        ),
        **slices.summary(),
        "runs_checked_via_api": checked,
        "errors": errors[:10],
    }


def batch_phase(
    srv: BenchServer, body: dict[str, Any], k: int, template: Template, raw_path: Path
) -> dict[str, Any]:
    clients = Clients(srv.api, body, k, BATCH)
    replayer = Replayer(raw_path, template)
    slices = Slices()
    try:
        for i in range(SLICES):
            for side in ("api", "raw") if i % 2 == 0 else ("raw", "api"):
                if side == "api":
                    slices.api.append(timed_api_slice(clients, srv.db_path))
                    continue
                n0, t0 = replayer.transitions, time.perf_counter()
                while time.perf_counter() - t0 < SLICE_S:
                    replayer.cycle()
                slices.base.append((replayer.transitions - n0, time.perf_counter() - t0))
        errors = list(clients.errors)
        checked = check_runs(clients.apis[0], clients.ids, errors)
    finally:
        clients.close()
        replayer.close()
    rows = sum(n for n, _ in slices.api)
    if rows != 3 * clients.cycles:
        errors.append(f"events grew by {rows}; {clients.cycles} cycles make {3 * clients.cycles}")
    api_seconds = sum(s for _, s in slices.api)
    requests = 2 * clients.cycles // BATCH
    return {
        "shape": f"batch of {BATCH}",
        "clients": k,
        "baseline": "raw SQLite replay of the same rows in the same commits",
        "cycles": clients.cycles,
        "requests_per_s": round(requests / api_seconds, 1),
        "commits_per_request": 2,
        "baseline_commits_per_s": round(replayer.commits / sum(s for _, s in slices.base), 1),
        **slices.summary(),
        "runs_checked_via_api": checked,
        "errors": errors[:10],
    }


def main() -> dict[str, Any]:
    phases = []
    with BenchServer(NAME, gpus=1) as srv:
        api = srv.api()
        digest = upload_snapshot(api)
        holder = hold_gpu(api, digest, srv.home)
        body = submit_body(["true"], digest, srv.home, ["resources.gpus=1", "name=cycle"])
        disk = raw_commits_per_s(srv.home / "raw-single-row.db", 1.0)
        print(f"{NAME}: raw single-row commits on this disk: {disk['commits_per_s']:,.0f}/s")
        single_t = capture_template(srv, api, body, 0)
        with BareServer(srv.home, single_t) as bare:
            for k in CONCURRENCY:
                print(f"{NAME}: one run per request, K={k}: {SLICES} x (API, bare) ...", flush=True)
                phases.append(single_phase(srv, bare, body, k))
        batch_t = capture_template(srv, api, body, BATCH)
        for k in BATCH_CONCURRENCY:
            print(f"{NAME}: batches of {BATCH}, K={k}: {SLICES} x (API, replay) ...", flush=True)
            phases.append(batch_phase(srv, body, k, batch_t, srv.home / "raw-replay.db"))
        api.cancel(holder)
        wait_state(api, holder, TERMINAL)
        api.close()
    rows = [
        headline(
            f"transitions/s / {'bare ASGI' if p['shape'] == 'single' else 'raw replay'} "
            f"({p['shape']}, K={p['clients']})",
            p["ratio"],
            target=f">= {TARGET}",
            ok=p["ratio"] >= TARGET and not p["errors"],
        )
        for p in phases
    ]
    result = {
        "method": (
            f"per phase: {SLICES} API slices of {SLICE_S} s interleaved with {SLICES} baseline "
            "slices (alternating first); ratio = API transitions/s over baseline transitions/s "
            "(summed over the slices). single: one run per request, baseline a bare ASGI "
            "server (same uvicorn) making the same commits per request; batch: "
            f"{BATCH} runs per submit and per cancel request, baseline raw SQLite replaying the "
            "same rows in the same commits"
        ),
        "sqlite_settings": "WAL, synchronous=FULL, foreign_keys=ON (both sides)",
        "raw_single_row_commits_per_s": disk["commits_per_s"],
        "phases": phases,
        "targets": {"ratio": TARGET},
        "headlines": rows,
    }
    path = write_results(NAME, result)
    for p in phases:
        spread = p["ratio_per_slice_pair"]
        print(
            f"  {p['shape']:>12} K={p['clients']:>2}: API {p['api_transitions_per_s']:8,.0f} "
            f"transitions/s ({p['requests_per_s']:6.1f} req/s) | baseline "
            f"{p['baseline_transitions_per_s']:8,.0f}/s | ratio {p['ratio']:.3f} "
            f"(per pair {spread['min']:.3f}-{spread['max']:.3f})"
            + (f"  ERRORS: {p['errors']}" if p["errors"] else "")
        )
    print_headlines(rows)
    print(f"  results: {path}")
    return result


if __name__ == "__main__":
    main()
    sys.exit(0)
