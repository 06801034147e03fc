"""Submit latency (submit -> RUNNING) against a bare ``subprocess.Popen``, and burst submits/s.

Part 1, latency: 200 runs of ``["true"]`` submitted one after another over one keep-alive
HTTP connection (snapshot uploaded once). For each run, latency = the run's ``started_at``
(stamped by the supervisor right after its ``Popen`` of the workload returned, i.e. after
the workload exec'd) minus ``time.time()`` just before the POST was sent; same machine,
same clock. The next run is submitted only once the previous one is terminal, so this is
latency on an idle server, not queueing. Baseline, interleaved one-for-one with the runs:
``subprocess.Popen(["true"])`` with the supervisor's flags, timed from before the call to
its return (CPython returns once the child exec'd) -- and, for reference, also to the end
of ``wait()``.

Part 2, burst: 1,000 submissions from 16 concurrent clients (one keep-alive connection
each) to a server with ``--gpus 1`` whose GPU a long ``sleep`` holds; the runs ask for one
GPU, so they stay QUEUED: this measures the durable submit path, not process spawning.
They are cancelled afterwards. Baseline: raw SQLite commits/s (WAL, synchronous=FULL, one
single-row INSERT per transaction) on the same disk for 2 s just before and just after the
burst; the headline is submits/s over their mean (each submit is one durable commit).
"""

from __future__ import annotations

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
    lat: list[float] = []
    acks: list[float] = []
    pop_exec: list[float] = []
    pop_wait: list[float] = []
    states: dict[str, int] = {}
    # where the time goes, from the run's own record: send -> created_at (the submit
    # request), created_at -> ADMITTED event (engine wake-up and admission), ADMITTED ->
    # started_at (snapshot unpack, launch.json, supervisor start, workload Popen)
    phases: dict[str, list[float]] = {
        "send_to_created": [],
        "created_to_admitted": [],
        "admitted_to_started": [],
    }
    with BenchServer(f"{NAME}-lat") as srv, tempfile.TemporaryDirectory() as cwd:
        api = srv.api()
        digest = upload_snapshot(api)
        body = submit_body(["true"], digest, srv.home, ["name=latency"])
        for i in range(WARMUP + RUNS):
            key = str(uuid.uuid4())
            sent = time.time()
            run_id = api.submit(body, key)["run"]["id"]
            acked = time.time()
            while True:
                run = api.get_run(run_id)
                if run["state"] in TERMINAL:
                    break
                time.sleep(POLL_S)
            if run["started_at"] is None:
                raise RuntimeError(f"run {run_id} ended {run['state']} without starting")
            if i >= WARMUP:
                lat.append(run["started_at"] - sent)
                acks.append(acked - sent)
                states[run["state"]] = states.get(run["state"], 0) + 1
                admitted = next(e["at"] for e in run["events"] if e["to_state"] == "ADMITTED")
                phases["send_to_created"].append(run["created_at"] - sent)
                phases["created_to_admitted"].append(admitted - run["created_at"])
                phases["admitted_to_started"].append(run["started_at"] - admitted)
            pe, pw = popen_true(Path(cwd))
            if i >= WARMUP:
                pop_exec.append(pe)
                pop_wait.append(pw)
        api.close()
    p50 = median(lat)
    base = median(pop_exec)
    return {
        "runs": RUNS,
        "warmup_runs_discarded": WARMUP,
        "final_states": states,
        "submit_to_running_ms": {
            "p50": ms(p50),
            "p90": ms(percentile(lat, 90)),
            "p99": ms(percentile(lat, 99)),
            "min": ms(min(lat)),
            "max": ms(max(lat)),
        },
        "submit_ack_ms": {"p50": ms(median(acks)), "p99": ms(percentile(acks, 99))},
        "breakdown_p50_ms": {name: ms(median(v)) for name, v in phases.items()},
        "popen_exec_ms": {"p50": ms(base), "p99": ms(percentile(pop_exec, 99))},
        "popen_exec_wait_ms": {"p50": ms(median(pop_wait)), "p99": ms(percentile(pop_wait, 99))},
        "overhead_p50_ms": ms(p50 - base),
        "ratio_p50_over_popen_exec": round(p50 / base, 2),
        "ratio_p50_over_popen_exec_wait": round(p50 / median(pop_wait), 2),
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
    print(f"{NAME}: {RUNS} sequential runs of `true` ...", flush=True)
    lat = latency_part()
    print(f"{NAME}: burst of {BURST} submissions from {CLIENTS} clients ...", flush=True)
    burst = burst_part()
    overhead = lat["overhead_p50_ms"]
    rows = [
        headline("submit->RUNNING p50 / Popen p50 (ratio)", lat["ratio_p50_over_popen_exec"]),
        headline(
            "overhead p50 (submit->RUNNING - Popen), ms",
            overhead,
            target=f"<= {TARGET_OVERHEAD_MS:.0f} ms",
            ok=overhead <= TARGET_OVERHEAD_MS,
        ),
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
    s = lat["submit_to_running_ms"]
    print(
        f"  submit->RUNNING p50 {s['p50']:.1f} ms  p99 {s['p99']:.1f} ms  "
        f"(submit acknowledged p50 {lat['submit_ack_ms']['p50']:.1f} ms)"
    )
    b = lat["breakdown_p50_ms"]
    print(
        f"  p50 breakdown: send->created {b['send_to_created']:.1f} ms, created->ADMITTED "
        f"{b['created_to_admitted']:.1f} ms, ADMITTED->started {b['admitted_to_started']:.1f} ms"
    )
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
