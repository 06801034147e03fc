"""Durable state transitions per second through the API, against raw SQLite commits/s.

Baseline: in this process, a SQLite file in the server's TAU_HOME (same disk), WAL mode,
``synchronous=FULL`` (as the server), one single-row INSERT of an event-shaped row per
transaction. fsync speed swings with other I/O on the machine (we saw 200 to 4,600
commits/s within a minute on a shared 2-core VM), so the baseline runs side by side with
the API, in slices: for each K, 5 x (0.6 s raw SQLite, clients paused; then 1 s of API
traffic) and a last 0.6 s raw slice: 3.6 s of baseline around 5 s of API.

API: a server with ``--gpus 1`` whose GPU a long ``sleep`` holds. K concurrent clients
(K = 1, 8, 32; one keep-alive connection each) loop over: submit a run asking for one GPU
(one request, one commit, two event rows: -> PENDING, PENDING -> QUEUED), then cancel it
while it is QUEUED (one request, one commit, one event row: QUEUED -> CANCELLED). A slice
ends when the clients have finished the cycles they started. Transitions are counted from
the database file itself (``SELECT count(*) FROM events``, opened read-only) at each
slice's start and end, checked against what the clients did, and the events of sampled
runs are checked through GET /api/v1/runs/{id}.

Two request shapes, both measured: *single* (one run per request, the cycle above) and
*batch* (``POST /api/v1/runs/batch`` with B runs, then ``POST /api/v1/runs/cancel`` of
those B runs: two requests and two durable commits carry 3 x B transitions; what a sweep
or ``tau cancel`` of many runs does). The issue's figure is reported for both.
"""

from __future__ import annotations

import statistics
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
    raw_commits_per_s,
    submit_body,
    upload_snapshot,
    wait_state,
    write_results,
)

NAME = "transitions"
SLICES = 5
API_SLICE_S = 1.0
RAW_SLICE_S = 0.6
CONCURRENCY = (1, 8, 32)
TARGET = 0.25
SAMPLES = 5  # runs per phase whose events are checked through the API
BATCH = 100  # runs per batch request
BATCH_CONCURRENCY = (1, 4)


class Clients:
    """K threads doing submit+cancel cycles while ``running``; parked otherwise."""

    def __init__(self, srv: BenchServer, body: dict[str, Any], k: int, batch: int = 0) -> None:
        self.body = body
        self.batch = batch  # 0: one run per request; B: B runs per request
        self.apis = [srv.api() for _ in range(k)]
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

    def _work(self, api: Any) -> None:
        while True:
            with self.cond:
                while not self.running and not self.stopping:
                    self.cond.wait()
                if self.stopping:
                    return
                self.active += 1
            try:
                rids = self._cycle(api)
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

    def _cycle(self, api: Any) -> list[str]:
        if not self.batch:
            rid = api.submit(self.body, str(uuid.uuid4()))["run"]["id"]
            api.cancel(rid)
            return [rid]
        items = [{**self.body, "idempotency_key": str(uuid.uuid4())} for _ in range(self.batch)]
        out = api.request("POST", "/api/v1/runs/batch", json_body={"runs": items})
        rids = [r["run"]["id"] for r in out["results"]]
        answers = api.request("POST", "/api/v1/runs/cancel", json_body={"runs": rids})
        bad = [a for a in answers["results"] if a["error"] or a["run"]["state"] != "CANCELLED"]
        if bad:
            raise RuntimeError(f"cancel answers: {bad[:3]}")
        return rids

    def run_for(self, seconds: float) -> None:
        with self.cond:
            self.running = True
            self.cond.notify_all()
        time.sleep(seconds)
        with self.cond:
            self.running = False
            while self.active:
                self.cond.wait()

    def close(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify_all()
        for t in self.threads:
            t.join()
        for api in self.apis:
            api.close()


def api_phase(
    srv: BenchServer, body: dict[str, Any], k: int, raw_path: Path, batch: int = 0
) -> dict[str, Any]:
    clients = Clients(srv, body, k, batch)
    raws: list[float] = []
    api_seconds = 0.0
    transitions = 0
    try:
        for _ in range(SLICES):
            raws.append(raw_commits_per_s(raw_path, RAW_SLICE_S)["commits_per_s"])
            before = count_events(srv.db_path)
            t0 = time.perf_counter()
            clients.run_for(API_SLICE_S)
            api_seconds += time.perf_counter() - t0
            transitions += count_events(srv.db_path) - before
        raws.append(raw_commits_per_s(raw_path, RAW_SLICE_S)["commits_per_s"])
        errors = list(clients.errors)
        checked = 0
        step = max(1, len(clients.ids) // SAMPLES)
        want = [(None, "PENDING"), ("PENDING", "QUEUED"), ("QUEUED", "CANCELLED")]
        for rid in clients.ids[::step][:SAMPLES]:
            run = clients.apis[0].get_run(rid)
            got = [(e["from_state"], e["to_state"]) for e in run["events"]]
            if got != want or run["state"] != "CANCELLED":
                errors.append(f"{rid}: events {got}, state {run['state']}")
            checked += 1
    finally:
        clients.close()
    cycles = clients.cycles
    if transitions != 3 * cycles:
        errors.append(f"events table grew by {transitions}; {cycles} cycles make {3 * cycles}")
    raw = statistics.mean(raws)
    requests = 2 * cycles // (batch or 1)
    requests_per_s = requests / api_seconds
    transitions_per_s = transitions / api_seconds
    return {
        "shape": f"batch of {batch}" if batch else "single",
        "clients": k,
        "api_seconds": round(api_seconds, 3),
        "cycles": cycles,
        "requests": requests,
        "commits": requests,
        "requests_per_s": round(requests_per_s, 1),
        "event_rows_written": transitions,
        "transitions_per_s": round(transitions_per_s, 1),
        "raw_commits_per_s_slices": raws,
        "raw_commits_per_s_mean": round(raw, 1),
        "transitions_over_raw_commits": round(transitions_per_s / raw, 3),
        "commits_over_raw_commits": round(requests_per_s / raw, 3),
        "runs_checked_via_api": checked,
        "errors": errors[:10],
    }


def main() -> dict[str, Any]:
    phases = []
    with BenchServer(NAME, gpus=1) as srv:
        raw_path = srv.home / "raw-baseline.db"
        api = srv.api()
        digest = upload_snapshot(api)
        holder = hold_gpu(api, digest, srv.home)
        body = submit_body(["true"], digest, srv.home, ["resources.gpus=1", "name=cycle"])
        plan = [(k, 0) for k in CONCURRENCY] + [(k, BATCH) for k in BATCH_CONCURRENCY]
        for k, batch in plan:
            shape = f"batches of {batch}" if batch else "one run per request"
            print(
                f"{NAME}: K={k}, {shape}: {SLICES} x ({RAW_SLICE_S} s raw SQLite, "
                f"{API_SLICE_S} s of submit+cancel cycles) ...",
                flush=True,
            )
            phases.append(api_phase(srv, body, k, raw_path, batch))
        api.cancel(holder)
        wait_state(api, holder, TERMINAL)
        api.close()
    rows = [
        headline(
            f"transitions/s / raw commits/s ({p['shape']}, K={p['clients']})",
            p["transitions_over_raw_commits"],
            target=f">= {TARGET}",
            ok=p["transitions_over_raw_commits"] >= TARGET and not p["errors"],
        )
        for p in phases
    ]
    result = {
        "method": (
            f"per phase: {SLICES} x ({RAW_SLICE_S} s raw SQLite with clients paused, "
            f"{API_SLICE_S} s API), then {RAW_SLICE_S} s raw; ratio = API transitions/s over "
            "the mean raw commits/s of that phase's slices; single = one run per request, "
            f"batch = {BATCH} runs per submit request and per cancel request"
        ),
        "raw_sqlite_settings": "WAL, synchronous=FULL, 1 single-row INSERT per transaction",
        "phases": phases,
        "targets": {"transitions_over_raw_commits": TARGET},
        "headlines": rows,
    }
    path = write_results(NAME, result)
    for p in phases:
        print(
            f"  {p['shape']:>12} K={p['clients']:>2}: raw {p['raw_commits_per_s_mean']:>7,.0f} "
            f"commits/s | API {p['requests_per_s']:6.1f} req/s = commits/s "
            f"(x{p['commits_over_raw_commits']:.3f}), {p['transitions_per_s']:7.1f} "
            f"transitions/s (x{p['transitions_over_raw_commits']:.3f})"
            + (f"  ERRORS: {p['errors']}" if p["errors"] else "")
        )
    print_headlines(rows)
    print(f"  results: {path}")
    return result


if __name__ == "__main__":
    main()
    sys.exit(0)
