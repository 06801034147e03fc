"""Short runs executed per second, against 20 threads calling ``Popen`` on the same command.

Part 1, burst: 200 runs of ``["true"]`` submitted by 20 concurrent clients (one keep-alive
HTTP connection each, 10 runs each, back to back) to a fresh server; the clock starts just
before the first POST is sent and stops when a watcher (its own connection, asking
``GET /runs/{id}`` for the oldest run it has not yet seen finished, every 20 ms, or at once
when the previous answer was a finished run) has seen the last run SUCCEEDED in the API.
Runs/s = 200 / that time. Also recorded: the time from the first POST to the last
SUCCEEDED event as the record has it (no polling granularity), and submits/s.

Part 2, backlog: 80 runs of ``true`` asking for 0.01 CPU each queue behind a blocker (a
``sleep`` asking for all of the machine's CPUs, the built-in policy's whole CPU quota);
the blocker is cancelled and the backlog drains. Drain rate = 80 / (last SUCCEEDED event
- the blocker's CANCELLED event, the moment its quota was released).

Baseline, in the same process, before and after each part: 20 threads calling
``subprocess.Popen(["true"])`` (the supervisor's flags) and ``wait()``, 200 runs in all;
runs/s. The headline is our runs/s over the baseline's, with the absolute runs/s printed
beside the issue's target (20 runs/s on this 2-core machine).

Where the time goes: CPU per run from /proc (the server's own; its supervisors' and
workloads', collected by their parents when reaped); how the engine batched the runs'
transitions (events of one commit share its time); and per run, from its record and its
attempt's files: to ADMITTED (engine wake-up, scheduling, the commit), ADMITTED ->
``launched_at`` in launch.json (snapshot unpack, launch.json), -> ``supervisor.pid``
written (the supervisor's fork or interpreter start), -> ``started_at`` (the workload's
exec), -> ``finished_at`` (the workload, after the supervisor's "running" push), and when
the engine recorded them: ``started_at`` -> RUNNING event, ``finished_at`` -> SUCCEEDED
event (status push round trip, engine pass, commit).
"""

from __future__ import annotations

import itertools
import json
import os
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
    Api,
    BenchServer,
    headline,
    median,
    ms,
    percentile,
    print_headlines,
    submit_body,
    upload_snapshot,
    wait_state,
    write_results,
)

NAME = "short_runs"
RUNS = 200
CLIENTS = 20
BACKLOG = 80
WATCH_POLL_S = 0.02
TARGET_RUNS_PER_S = 20.0
# (name, from, to): the supervisor's timeline (admitted -> ... -> the workload's exit) and
# when the engine recorded what it did (RUNNING after its start, SUCCEEDED after its exit).
STAGES = (
    ("to_admitted", "queued", "admitted"),
    ("admitted_to_launched", "admitted", "launched"),
    ("launched_to_supervisor_up", "launched", "supervisor_up"),
    ("supervisor_up_to_started", "supervisor_up", "started"),
    ("started_to_finished", "started", "finished"),
    ("started_to_running_event", "started", "running"),
    ("finished_to_succeeded_event", "finished", "succeeded"),
)


# -- the baseline --------------------------------------------------------------------------
def popen_runs_per_s(total: int = RUNS, threads: int = CLIENTS) -> float:
    """``total`` runs of ``true`` by ``threads`` threads (Popen + wait each); runs/s."""
    cwd = tempfile.mkdtemp(prefix="tau-bench-popen-")
    left = iter(range(total))
    lock = threading.Lock()
    start = threading.Barrier(threads + 1)

    def worker() -> None:
        start.wait()
        while True:
            with lock:
                if next(left, None) is None:
                    return
            subprocess.Popen(
                ["true"],
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                close_fds=True,
            ).wait()

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for t in pool:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in pool:
        t.join()
    elapsed = time.perf_counter() - t0
    os.rmdir(cwd)
    return total / elapsed


# -- CPU spent ----------------------------------------------------------------------------
def cpu_seconds(pid: int) -> tuple[float, float]:
    """(the server's own CPU, what its supervisors and workloads used) in seconds, from
    /proc. A supervisor's CPU is its parent's once reaped, and a workload's its
    supervisor's: the parent is the server, or the server's supervisor fork server (a
    child of the server, whose own CPU counts with the supervisors')."""
    own, reaped = _stat_times(pid)
    for child in _children_of(pid):
        c_own, c_reaped = _stat_times(child)
        reaped += c_own + c_reaped
    return own, reaped


def _stat_times(pid: int) -> tuple[float, float]:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0, 0.0
    tick = os.sysconf("SC_CLK_TCK")
    utime, stime, cutime, cstime = (int(x) / tick for x in fields[11:15])
    return utime + stime, cutime + cstime


def _children_of(pid: int) -> list[int]:
    """Child processes of ``pid``, whichever of its threads started them."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(x) for x in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def cpu_per_run_ms(
    before: tuple[float, float], after: tuple[float, float], n: int
) -> dict[str, float]:
    return {
        "server": round((after[0] - before[0]) / n * 1000, 1),
        "supervisors_and_workloads": round((after[1] - before[1]) / n * 1000, 1),
    }


# -- watching runs end -----------------------------------------------------------------------
def watch_until_done(api: Api, run_ids: list[str], timeout: float = 300.0) -> dict[str, Any]:
    """Poll the oldest run not yet seen finished until every run is; the time the last one
    was seen and every run's final answer."""
    final: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + timeout
    todo = list(run_ids)
    while todo:
        run = api.get_run(todo[0])
        if run["state"] in TERMINAL:
            final[todo.pop(0)] = run
            continue
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(todo)} runs unfinished after {timeout:.0f} s")
        time.sleep(WATCH_POLL_S)
    return {"seen_at": time.time(), "runs": final}


def event_at(run: dict[str, Any], state: str) -> float:
    return float(next(e["at"] for e in run["events"] if e["to_state"] == state))


def commits(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """How the engine batched these runs' transitions: it commits each pass's moves in one
    transaction, which stamps all of their events with one time, so events sharing a
    time (and a target state) came from one commit."""
    by_state: dict[str, set[float]] = {}
    for run in runs:
        for e in run["events"]:
            if e["to_state"] in ("ADMITTED", "RUNNING", "SUCCEEDED"):
                by_state.setdefault(e["to_state"], set()).add(e["at"])
    every = sorted(set().union(*by_state.values())) if by_state else []
    gaps = [b - a for a, b in itertools.pairwise(every)]
    return {
        "commits": {state: len(times) for state, times in sorted(by_state.items())},
        "transitions_per_commit": round(3 * len(runs) / max(1, len(every)), 2),
        "gap_between_commits_ms": {"p50": ms(median(gaps)), "p99": ms(percentile(gaps, 99))}
        if gaps
        else {},
    }


def stage_split(
    home: Path, runs: list[dict[str, Any]], released: float | None = None
) -> dict[str, dict[str, float]]:
    """p50/p99 of each stage (seconds -> ms) over ``runs``, from records and files. The
    first stage starts at submission, or at ``released`` for runs that waited for it."""
    samples: dict[str, list[float]] = {name: [] for name, _, _ in STAGES}
    for run in runs:
        adir = home / "runs" / run["id"] / "attempts" / "0"
        try:
            launch = json.loads((adir / "launch.json").read_text())
            status = json.loads((adir / "status.json").read_text())
            at = {
                "queued": max(run["created_at"], released or 0.0),
                "admitted": event_at(run, "ADMITTED"),
                "launched": float(launch["launched_at"]),
                "supervisor_up": (adir / "supervisor.pid").stat().st_mtime,
                "started": float(status["started_at"]),
                "finished": float(status["finished_at"]),
                "running": event_at(run, "RUNNING"),
                "succeeded": event_at(run, "SUCCEEDED"),
            }
        except (OSError, ValueError, KeyError, StopIteration):
            continue
        for name, a, b in STAGES:
            samples[name].append(at[b] - at[a])
    first = "released_to_admitted" if released is not None else "created_to_admitted"
    return {
        (first if name == "to_admitted" else name): {
            "p50": ms(median(v)),
            "p99": ms(percentile(v, 99)),
        }
        for name, v in samples.items()
        if v
    }


# -- part 1: 200 runs from 20 clients ----------------------------------------------------------
def burst_part() -> dict[str, Any]:
    with BenchServer(f"{NAME}-burst") as srv:
        api = srv.api()
        digest = upload_snapshot(api)
        body = submit_body(["true"], digest, srv.home, ["name=short"])
        warm = api.submit(body, str(uuid.uuid4()))["run"]["id"]  # imports, first unpack
        wait_state(api, warm, TERMINAL)
        clients = [srv.api() for _ in range(CLIENTS)]
        for c in clients:  # open each connection before the clock starts
            c.request("GET", "/api/v1/runs?limit=1")
        assert srv.proc is not None
        cpu_before = cpu_seconds(srv.proc.pid)
        ids: list[list[str]] = [[] for _ in range(CLIENTS)]
        acked: list[float] = []
        bad: list[str] = []
        start = threading.Barrier(CLIENTS + 1)

        def client(k: int) -> None:
            start.wait()
            for _ in range(RUNS // CLIENTS):
                try:
                    ids[k].append(clients[k].submit(body, str(uuid.uuid4()))["run"]["id"])
                except Exception as exc:
                    bad.append(repr(exc))
            acked.append(time.time())

        threads = [threading.Thread(target=client, args=(k,)) for k in range(CLIENTS)]
        for t in threads:
            t.start()
        t_first = time.time()
        start.wait()
        for t in threads:
            t.join()
        # Round robin over the clients: close to the order the runs were accepted in.
        all_ids = [part[j] for j in range(RUNS) for part in ids if j < len(part)]
        watched = watch_until_done(api, all_ids)
        time.sleep(1.0)  # the reaper collects the last supervisors (every 0.5 s)
        cpu = cpu_per_run_ms(cpu_before, cpu_seconds(srv.proc.pid), RUNS)
        runs = list(watched["runs"].values())
        for c in [*clients, api]:
            c.close()
        split = stage_split(srv.home, runs)
    states = _states(runs)
    wall = watched["seen_at"] - t_first
    last_event = max(event_at(r, "SUCCEEDED") for r in runs if r["state"] == "SUCCEEDED")
    return {
        "runs": RUNS,
        "clients": CLIENTS,
        "final_states": states,
        "errors": bad[:10],
        "error_count": len(bad),
        "submit_seconds": round(max(acked) - t_first, 3),
        "submits_per_s": round(RUNS / (max(acked) - t_first), 1),
        "seconds_to_last_succeeded_seen": round(wall, 3),
        "seconds_to_last_succeeded_event": round(last_event - t_first, 3),
        "runs_per_s": round(RUNS / wall, 2),
        "cpu_ms_per_run": cpu,
        "engine_commits": commits(runs),
        "stages_ms": split,
    }


# -- part 2: a backlog released at once --------------------------------------------------------
def backlog_part() -> dict[str, Any]:
    cpus = os.cpu_count() or 1
    with BenchServer(f"{NAME}-backlog") as srv:
        api = srv.api()
        digest = upload_snapshot(api)
        hold = submit_body(["sleep", "600"], digest, srv.home, [f"resources.cpus={cpus}"])
        blocker = api.submit(hold, "bench-blocker")["run"]["id"]
        wait_state(api, blocker, {"RUNNING"}, timeout=30)
        body = submit_body(["true"], digest, srv.home, ["resources.cpus=0.01", "name=backlog"])
        ids = [api.submit(body, str(uuid.uuid4()))["run"]["id"] for _ in range(BACKLOG)]
        time.sleep(0.5)  # let the engine settle: every run stays QUEUED behind the blocker
        queued = sum(api.get_run(i)["state"] == "QUEUED" for i in ids)
        assert srv.proc is not None
        cpu_before = cpu_seconds(srv.proc.pid)
        t_cancel = time.time()
        api.cancel(blocker)
        watched = watch_until_done(api, ids)
        time.sleep(1.0)  # the reaper collects the last supervisors (every 0.5 s)
        cpu = cpu_per_run_ms(cpu_before, cpu_seconds(srv.proc.pid), BACKLOG)
        released = event_at(wait_state(api, blocker, TERMINAL), "CANCELLED")
        runs = list(watched["runs"].values())
        api.close()
        split = stage_split(srv.home, runs, released)
    last = max(event_at(r, "SUCCEEDED") for r in runs if r["state"] == "SUCCEEDED")
    first_admitted = min(event_at(r, "ADMITTED") for r in runs)
    return {
        "backlog": BACKLOG,
        "queued_behind_blocker": queued,
        "final_states": _states(runs),
        "cancel_to_released_s": round(released - t_cancel, 3),
        "released_to_first_admitted_s": round(first_admitted - released, 3),
        "drain_seconds": round(last - released, 3),
        "drain_runs_per_s": round(BACKLOG / (last - released), 2),
        "drain_seen_seconds_from_cancel": round(watched["seen_at"] - t_cancel, 3),
        "cpu_ms_per_run": cpu,
        "engine_commits": commits(runs),
        "stages_ms": split,
    }


def _states(runs: list[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in runs:
        out[r["state"]] = out.get(r["state"], 0) + 1
    return out


def main() -> dict[str, Any]:
    print(f"{NAME}: baseline, {RUNS} x Popen(['true']) from {CLIENTS} threads ...", flush=True)
    base = [popen_runs_per_s()]
    print(f"{NAME}: {RUNS} runs of `true` from {CLIENTS} clients ...", flush=True)
    burst = burst_part()
    base.append(popen_runs_per_s())
    print(f"{NAME}: a backlog of {BACKLOG} runs released at once ...", flush=True)
    backlog = backlog_part()
    base.append(popen_runs_per_s())
    popen = median(base)
    ok_states = burst["final_states"] == {"SUCCEEDED": RUNS} and burst["error_count"] == 0
    rows = [
        headline(
            "runs/s (200 runs, 20 clients) / Popen runs/s", round(burst["runs_per_s"] / popen, 3)
        ),
        headline(
            "runs/s executed (200 runs, 20 clients)",
            burst["runs_per_s"],
            target=f">= {TARGET_RUNS_PER_S:.0f}/s",
            ok=ok_states and burst["runs_per_s"] >= TARGET_RUNS_PER_S,
        ),
        headline(
            "backlog of 80 drained, runs/s",
            backlog["drain_runs_per_s"],
            target=f">= {TARGET_RUNS_PER_S:.0f}/s",
            ok=backlog["final_states"] == {"SUCCEEDED": BACKLOG}
            and backlog["drain_runs_per_s"] >= TARGET_RUNS_PER_S,
        ),
    ]
    result = {
        "popen_runs_per_s": [round(x, 1) for x in base],
        "burst": burst,
        "backlog": backlog,
        "targets": {"runs_per_s": TARGET_RUNS_PER_S},
        "headlines": rows,
    }
    path = write_results(NAME, result)
    print(
        f"  burst: {burst['final_states']} in {burst['seconds_to_last_succeeded_seen']:.2f} s "
        f"({burst['runs_per_s']:.1f} runs/s; last SUCCEEDED event at "
        f"{burst['seconds_to_last_succeeded_event']:.2f} s); submits {burst['submits_per_s']:.0f}/s"
    )
    print(
        f"  backlog: {backlog['queued_behind_blocker']}/{BACKLOG} queued, "
        f"{backlog['final_states']}, drained in {backlog['drain_seconds']:.2f} s "
        f"({backlog['drain_runs_per_s']:.1f} runs/s)"
    )
    print("  Popen baseline runs/s: " + ", ".join(f"{x:.0f}" for x in base))
    for part in ("burst", "backlog"):
        c = result[part]["cpu_ms_per_run"]
        print(
            f"  {part} CPU per run: server {c['server']:.1f} ms, supervisor and workload "
            f"{c['supervisors_and_workloads']:.1f} ms"
        )
        k = result[part]["engine_commits"]
        print(
            f"  {part} engine commits {k['commits']}, {k['transitions_per_commit']} "
            f"transitions per commit, gap p50 {k['gap_between_commits_ms'].get('p50')} ms"
        )
    for part in ("burst", "backlog"):
        stages = result[part]["stages_ms"]
        print(
            f"  {part} stages p50 (p99), ms: "
            + ", ".join(f"{k} {v['p50']:.1f} ({v['p99']:.0f})" for k, v in stages.items())
        )
    print_headlines(rows)
    print(f"  results: {path}")
    return result


if __name__ == "__main__":
    main()
    sys.exit(0)
