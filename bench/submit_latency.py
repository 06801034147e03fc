"""Submit latency (submit -> RUNNING) against a bare ``subprocess.Popen``, and burst submits/s.

Part 1, latency: 200 runs of ``["sleep", "0.05"]`` submitted one after another over one
keep-alive HTTP connection (snapshot uploaded once). The clock starts at ``time.time()``
just before the POST is sent and stops when an answer of ``GET /api/v1/runs/{id}``, asked
every 2 ms on a second keep-alive connection from the moment the submit was answered,
first says RUNNING (or a later state): where a user sees the run running. The workload
lives 50 ms so that RUNNING is a state the API shows, not one a fast exit skips. The
next run is submitted only once the previous one is terminal, so this is latency on an
idle server, not queueing. Also per run, from its record (same machine, same clock): the
supervisor's ``started_at`` (stamped right after its ``Popen`` of the workload returned,
the clock's stop before 2026-12) and the RUNNING event's time (its commit). Baseline,
interleaved one-for-one with the runs: ``subprocess.Popen(["true"])`` with the
supervisor's flags, timed from before the call to its return (CPython returns once the
child exec'd) -- and, for reference, also to the end of ``wait()``. p50 and p99 of both
are reported, and each ratio.

Part 2, burst: 1,000 submissions from 16 concurrent clients (one keep-alive connection
each) to a server with ``--gpus 1`` whose GPU a long ``sleep`` holds; the runs ask for one
GPU, so they stay QUEUED: this measures the durable submit path, not process spawning.
They are cancelled afterwards. Baseline: raw SQLite commits/s (WAL, synchronous=FULL, one
single-row INSERT per transaction) on the same disk for 2 s just before and just after the
burst; the headline is submits/s over their mean (each submit is one durable commit).
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from bench._common import (
    TERMINAL,
    BenchServer,
    headline,
    hold_gpu,
    median,
    ms,
    percentile,
    print_headlines,
    raw_commits_per_s,
    submit_body,
    upload_snapshot,
    wait_state,
    write_results,
)

NAME = "submit_latency"
RUNS = 200
WARMUP = 3
BURST = 1000
CLIENTS = 16
POLL_S = 0.01
RUNNING_POLL_S = 0.002
WORKLOAD = ["sleep", "0.05"]
TARGET_OVERHEAD_MS = 150.0
TARGET_BURST = 100.0


def popen_true(cwd: Path) -> tuple[float, float]:
    """(seconds until Popen returned, seconds until wait() returned) for ``true``."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        ["true"],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )
    t1 = time.perf_counter()
    proc.wait()
    return t1 - t0, time.perf_counter() - t0


def latency_part() -> dict[str, Any]:
    seen: list[float] = []  # submit -> GET answers RUNNING (the headline)
    stamped: list[float] = []  # submit -> the supervisor's started_at
    committed: list[float] = []  # submit -> the RUNNING event
    acks: list[float] = []
    pop_exec: list[float] = []
    pop_wait: list[float] = []
    states: dict[str, int] = {}
    first_seen: dict[str, int] = {}
    # Where the time goes, from the run's own record: send -> created_at (the submit
    # request), created_at -> ADMITTED event (engine wake-up and admission), ADMITTED ->
    # started_at (snapshot unpack, launch.json, supervisor fork and start, workload
    # Popen), started_at -> RUNNING event (the supervisor's status push, the engine's
    # pass, the commit), RUNNING event -> seen (the GET that saw it: poll interval and
    # request).
    phases: dict[str, list[float]] = {
        "send_to_created": [],
        "created_to_admitted": [],
        "admitted_to_started": [],
        "started_to_running_event": [],
        "running_event_to_seen": [],
    }
    with BenchServer(f"{NAME}-lat") as srv, tempfile.TemporaryDirectory() as cwd:
        api, watcher = srv.api(), srv.api()
        digest = upload_snapshot(api)
        body = submit_body(WORKLOAD, digest, srv.home, ["name=latency"])
        watcher.request("GET", "/api/v1/runs?limit=1")  # connected before the clock runs
        for i in range(WARMUP + RUNS):
            key = str(uuid.uuid4())
            sent = time.time()
            run_id = api.submit(body, key)["run"]["id"]
            acked = time.time()
            while True:
                state = watcher.get_run(run_id)["state"]
                if state == "RUNNING" or state in TERMINAL:
                    running_seen = time.time()
                    break
                time.sleep(RUNNING_POLL_S)
            while True:
                run = api.get_run(run_id)
                if run["state"] in TERMINAL:
                    break
                time.sleep(POLL_S)
            if run["started_at"] is None:
                raise RuntimeError(f"run {run_id} ended {run['state']} without starting")
            if i >= WARMUP:
                at = {e["to_state"]: e["at"] for e in run["events"]}
                seen.append(running_seen - sent)
                stamped.append(run["started_at"] - sent)
                committed.append(at["RUNNING"] - sent)
                acks.append(acked - sent)
                states[run["state"]] = states.get(run["state"], 0) + 1
                first_seen[state] = first_seen.get(state, 0) + 1
                phases["send_to_created"].append(run["created_at"] - sent)
                phases["created_to_admitted"].append(at["ADMITTED"] - run["created_at"])
                phases["admitted_to_started"].append(run["started_at"] - at["ADMITTED"])
                phases["started_to_running_event"].append(at["RUNNING"] - run["started_at"])
                phases["running_event_to_seen"].append(running_seen - at["RUNNING"])
            pe, pw = popen_true(Path(cwd))
            if i >= WARMUP:
                pop_exec.append(pe)
                pop_wait.append(pw)
        api.close()
        watcher.close()
    p50, p99 = median(seen), percentile(seen, 99)
    base50, base99 = median(pop_exec), percentile(pop_exec, 99)
    slowest = sorted(range(len(seen)), key=seen.__getitem__)[-max(1, len(seen) // 100) :]
    return {
        "runs": RUNS,
        "workload": WORKLOAD,
        "warmup_runs_discarded": WARMUP,
        "final_states": states,
        "state_first_seen": first_seen,
        "submit_to_running_seen_ms": _dist(seen),
        "submit_to_started_at_ms": _dist(stamped),
        "submit_to_running_event_ms": _dist(committed),
        "submit_ack_ms": {"p50": ms(median(acks)), "p99": ms(percentile(acks, 99))},
        "breakdown_p50_ms": {name: ms(median(v)) for name, v in phases.items()},
        "breakdown_p99_ms": {name: ms(percentile(v, 99)) for name, v in phases.items()},
        # The slowest 1 %: which stage made them slow.
        "slowest_runs_ms": [{n: ms(v[k]) for n, v in phases.items()} for k in slowest],
        "popen_exec_ms": {"p50": ms(base50), "p99": ms(base99)},
        "popen_exec_wait_ms": {"p50": ms(median(pop_wait)), "p99": ms(percentile(pop_wait, 99))},
        "p99_over_p50": round(p99 / p50, 2),
        "overhead_p50_ms": ms(p50 - base50),
        "overhead_p99_ms": ms(p99 - base99),
        "ratio_p50_over_popen_exec": round(p50 / base50, 2),
        "ratio_p99_over_popen_exec_p99": round(p99 / base99, 2),
        "ratio_p50_over_popen_exec_wait": round(p50 / median(pop_wait), 2),
    }


def _dist(values: list[float]) -> dict[str, float]:
    return {
        "p50": ms(median(values)),
        "p90": ms(percentile(values, 90)),
        "p99": ms(percentile(values, 99)),
        "min": ms(min(values)),
        "max": ms(max(values)),
    }


def burst_part() -> dict[str, Any]:
    with BenchServer(f"{NAME}-burst", gpus=1) as srv:
        api = srv.api()
        digest = upload_snapshot(api)
        holder = hold_gpu(api, digest, srv.home)
        body = submit_body(["true"], digest, srv.home, ["resources.gpus=1", "name=burst"])
        raw_before = raw_commits_per_s(srv.home / "raw-baseline.db")
        keys = [str(uuid.uuid4()) for _ in range(BURST)]
        shares = [keys[i::CLIENTS] for i in range(CLIENTS)]
        clients = [srv.api() for _ in range(CLIENTS)]
        for c in clients:  # open each connection before the clock starts
            c.request("GET", "/api/v1/runs?limit=1")
        start = threading.Barrier(CLIENTS + 1)
        lat: list[list[float]] = [[] for _ in range(CLIENTS)]
        ids: list[list[str]] = [[] for _ in range(CLIENTS)]
        bad: list[str] = []

        def worker(k: int) -> None:
            start.wait()
            for key in shares[k]:
                t0 = time.perf_counter()
                try:
                    out = clients[k].submit(body, key)
                except Exception as exc:
                    bad.append(repr(exc))
                    continue
                lat[k].append(time.perf_counter() - t0)
                ids[k].append(out["run"]["id"])
                if out["run"]["state"] != "QUEUED" or not out["created"]:
                    bad.append(f"{out['run']['id']}: {out['run']['state']} {out['created']}")

        threads = [threading.Thread(target=worker, args=(k,)) for k in range(CLIENTS)]
        for t in threads:
            t.start()
        start.wait()
        t0 = time.perf_counter()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - t0
        raw_after = raw_commits_per_s(srv.home / "raw-baseline.db")
        all_ids = [i for part in ids for i in part]
        all_lat = [x for part in lat for x in part]
        # Clean up: cancel every queued run, then the GPU holder.
        cancel_errors: list[str] = []

        def canceller(k: int) -> None:
            for rid in all_ids[k::CLIENTS]:
                try:
                    clients[k].cancel(rid)
                except Exception as exc:
                    cancel_errors.append(repr(exc))

        cthreads = [threading.Thread(target=canceller, args=(k,)) for k in range(CLIENTS)]
        for t in cthreads:
            t.start()
        for t in cthreads:
            t.join()
        api.cancel(holder)
        wait_state(api, holder, TERMINAL)
        for c in [*clients, api]:
            c.close()
    rate = len(all_ids) / elapsed
    raw = (raw_before["commits_per_s"] + raw_after["commits_per_s"]) / 2
    return {
        "raw_sqlite_commits_per_s": [raw_before["commits_per_s"], raw_after["commits_per_s"]],
        "submits_over_raw_commits": round(rate / raw, 3),
        "submissions": BURST,
        "accepted_queued": len(all_ids),
        "errors": bad[:10],
        "error_count": len(bad),
        "cancel_errors": len(cancel_errors),
        "clients": CLIENTS,
        "seconds": round(elapsed, 3),
        "submits_per_s": round(rate, 1),
        "request_ms": {"p50": ms(median(all_lat)), "p99": ms(percentile(all_lat, 99))},
    }


def main() -> dict[str, Any]:
    print(f"{NAME}: {RUNS} sequential runs of `{shlex.join(WORKLOAD)}` ...", flush=True)
    lat = latency_part()
    print(f"{NAME}: burst of {BURST} submissions from {CLIENTS} clients ...", flush=True)
    burst = burst_part()
    overhead = lat["overhead_p50_ms"]
    rows = [
        headline("submit->RUNNING seen p50 / Popen p50 (ratio)", lat["ratio_p50_over_popen_exec"]),
        headline(
            "submit->RUNNING seen p99 / Popen p99 (ratio)", lat["ratio_p99_over_popen_exec_p99"]
        ),
        headline(
            "overhead p50 (submit->RUNNING seen - Popen), ms",
            overhead,
            target=f"<= {TARGET_OVERHEAD_MS:.0f} ms",
            ok=overhead <= TARGET_OVERHEAD_MS,
        ),
        headline("overhead p99 (submit->RUNNING seen - Popen), ms", lat["overhead_p99_ms"]),
        headline("submit->RUNNING seen p99 / p50", lat["p99_over_p50"]),
        headline("burst submits/s / raw SQLite commits/s", burst["submits_over_raw_commits"]),
        headline(
            "burst submits/s (16 clients, durable)",
            burst["submits_per_s"],
            target=f">= {TARGET_BURST:.0f}/s",
            ok=burst["submits_per_s"] >= TARGET_BURST and burst["error_count"] == 0,
        ),
    ]
    result = {
        "latency": lat,
        "burst": burst,
        "targets": {"overhead_p50_ms": TARGET_OVERHEAD_MS, "burst_submits_per_s": TARGET_BURST},
        "headlines": rows,
    }
    path = write_results(NAME, result)
    for label, key in (
        ("submit->RUNNING seen in the API", "submit_to_running_seen_ms"),
        ("submit->RUNNING event (commit)", "submit_to_running_event_ms"),
        ("submit->supervisor's started_at", "submit_to_started_at_ms"),
    ):
        s = lat[key]
        print(f"  {label:<33} p50 {s['p50']:6.1f} ms  p99 {s['p99']:6.1f} ms")
    print(f"  submit acknowledged p50 {lat['submit_ack_ms']['p50']:.1f} ms")
    for q in ("p50", "p99"):
        b = lat[f"breakdown_{q}_ms"]
        print(f"  {q} breakdown: " + ", ".join(f"{k} {v:.1f}" for k, v in b.items()))
    print(
        f"  Popen(['true']) p50 {lat['popen_exec_ms']['p50']:.2f} ms to exec, "
        f"{lat['popen_exec_wait_ms']['p50']:.2f} ms to exec+exit"
    )
    print(
        f"  burst: {burst['accepted_queued']}/{BURST} queued in {burst['seconds']:.2f} s, "
        f"request p50 {burst['request_ms']['p50']:.1f} ms p99 {burst['request_ms']['p99']:.1f} ms"
    )
    print(
        "  raw SQLite commits/s around the burst: "
        + ", ".join(f"{x:,.0f}" for x in burst["raw_sqlite_commits_per_s"])
    )
    print_headlines(rows)
    print(f"  results: {path}")
    return result


if __name__ == "__main__":
    main()
    sys.exit(0)
