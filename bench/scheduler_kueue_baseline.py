"""Kueue's baseline scheduler scenario, replayed against TauGrid's scheduler on a virtual clock.

``python -m bench.scheduler_kueue_baseline [--scale F] [--full]``. The scenario is Kueue's
``test/performance/scheduler/configs/baseline/generator.yaml`` (anchors.md K2/K3):
5 cohorts x 6 ClusterQueues, one flavor, nominal 20 CPUs, borrowing limit 100,
``withinClusterQueue: LowerPriority``, ``reclaimWithinCohort: Any``, BestEffortFIFO; per
queue 350 small (1 CPU, 200 ms, priority 50, one every 100 ms), 100 medium (5 CPUs, 500 ms,
priority 100, one every 500 ms) and 50 large (20 CPUs, 1 s, priority 200, one every 1.2 s)
workloads: 15,000 in all. As in Kueue's runner, a workload runs for its runtime from its
(last) admission, an evicted one gives its quota back at once and waits again, and time to
admission runs from creation to the last admission.

The clock is virtual: an event loop of arrivals and completions, with ``schedule()`` called
at every event time (again at once after preemptions, whose victims stop immediately) and
its decisions applied. Nothing sleeps. Reported: the wall time of the simulated workload,
ClusterQueue usage (time-averaged used / nominal over the run, Kueue's definition), mean
time to admission per class, each as a ratio to Kueue's published means (351 s, 55.9 %,
16.5 / 76.8 / 215.5 s), the simulator's throughput in admissions per second of real time,
and the scheduler's own cost: p50 and p99 per call and CPU seconds per simulated second.
The calls go to the incremental scheduler the server runs (``Scheduler``, state kept
between calls); ``--full`` replays with the full recomputation (``schedule()``) instead.
"""

from __future__ import annotations

import argparse
import heapq
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench._common import headline, percentile, print_headlines, write_results
from taugrid.domain.quota import (
    Admitted,
    ClusterQueue,
    Flavor,
    FlavorQuotas,
    ResourceQuota,
    Snapshot,
    Workload,
)
from taugrid.domain.scheduling import Decisions, schedule
from taugrid.domain.scheduling_state import Scheduler

NAME = "scheduler_kueue_baseline"
CPU = 1000  # millicores per CPU
COHORTS, QUEUES_PER_COHORT, NOMINAL, BORROWING = 5, 6, 20, 100


@dataclass(frozen=True)
class Klass:
    name: str
    count: int
    interval_ms: int
    runtime_ms: int
    priority: int
    cpus: int


CLASSES = (
    Klass("small", 350, 100, 200, 50, 1),
    Klass("medium", 100, 500, 500, 100, 5),
    Klass("large", 50, 1200, 1000, 200, 20),
)
# Kueue's published means (anchors.md K3; rangespec.yaml comments).
KUEUE = {"wall_s": 351.0, "usage_pct": 55.9, "large": 16.5, "medium": 76.8, "small": 215.5}


def policy() -> dict[str, ClusterQueue]:
    queues = {}
    for c in range(COHORTS):
        for i in range(QUEUES_PER_COHORT):
            name = f"cq-0-{i}-cohort-{c}"
            quota = ResourceQuota(NOMINAL * CPU, BORROWING * CPU)
            queues[name] = ClusterQueue(
                name,
                (FlavorQuotas("rf", {"cpu": quota}),),
                f"cohort-{c}",
                "BestEffortFIFO",
                "LowerPriority",
                "Any",
            )
    return queues


def arrivals(queues: dict[str, ClusterQueue], scale: float) -> list[tuple[int, Workload, Klass]]:
    out = []
    for q in queues:
        for set_idx, k in enumerate(CLASSES):
            for n in range(max(1, round(k.count * scale))):
                t = (n + 1) * k.interval_ms  # the generator waits one interval before each
                w = Workload(
                    f"{q}/{k.name}-{set_idx}-{n}",
                    q,
                    q,
                    "perf",
                    k.priority,
                    t / 1000.0,
                    {"cpu": k.cpus * CPU},
                )
                out.append((t, w, k))
    return out


def simulate(scale: float = 1.0, full: bool = False) -> dict[str, Any]:
    decide: Callable[[Snapshot], Decisions] = schedule if full else Scheduler().decide
    queues = policy()
    flavors = {"rf": Flavor("rf")}
    klass_of: dict[str, Klass] = {}
    created: dict[str, int] = {}
    events: list[tuple[int, int, str, int]] = []  # (time ms, kind, workload id, attempt)
    by_id: dict[str, Workload] = {}
    for t, w, k in arrivals(queues, scale):
        klass_of[w.id] = k
        created[w.id] = t
        by_id[w.id] = w
        heapq.heappush(events, (t, 1, w.id, 0))
    pending: dict[str, Workload] = {}
    admitted: dict[str, Admitted] = {}
    attempt: dict[str, int] = {}
    admitted_at: dict[str, int] = {}
    finished: dict[str, int] = {}
    evictions = 0
    admissions = 0
    calls = 0
    schedule_s = 0.0
    call_s: list[float] = []
    most_pending = 0
    used = dict.fromkeys(queues, 0)  # millicores per queue
    used_ms: dict[str, float] = dict.fromkeys(queues, 0.0)  # millicore-milliseconds
    last_t = 0
    wall_t0 = time.perf_counter()
    cpu_t0 = time.process_time()
    while events:
        t = events[0][0]
        for q in queues:
            used_ms[q] += used[q] * (t - last_t)
        last_t = t
        while events and events[0][0] == t:
            _, kind, wid, att = heapq.heappop(events)
            if kind == 1:
                pending[wid] = by_id[wid]
            elif attempt.get(wid) == att and wid in admitted:  # a completion still current
                a = admitted.pop(wid)
                used[a.workload.cluster_queue] -= a.workload.requests["cpu"]
                finished[wid] = t
        for _ in range(100):  # until nothing changes at this instant
            snap = Snapshot(queues, flavors, tuple(admitted.values()), tuple(pending.values()), {})
            most_pending = max(most_pending, len(pending))
            s0 = time.perf_counter()
            d = decide(snap)
            took = time.perf_counter() - s0
            schedule_s += took
            call_s.append(took)
            calls += 1
            for p in d.preemptions:  # victims stop at once and queue again (Kueue's runner)
                a = admitted.pop(p.victim_id)
                used[a.workload.cluster_queue] -= a.workload.requests["cpu"]
                pending[p.victim_id] = a.workload
                evictions += 1
            for x in d.admissions:
                w = pending.pop(x.workload_id)
                admitted[w.id] = Admitted(w, x.flavor, t / 1000.0)
                used[w.cluster_queue] += w.requests["cpu"]
                attempt[w.id] = attempt.get(w.id, 0) + 1
                admitted_at[w.id] = t
                admissions += 1
                heapq.heappush(events, (t + klass_of[w.id].runtime_ms, 2, w.id, attempt[w.id]))
            if not d.preemptions:
                break
    real_s = time.perf_counter() - wall_t0
    cpu_s = time.process_time() - cpu_t0
    assert not pending and not admitted, "every workload finishes"
    wall_ms = last_t
    nominal_total = NOMINAL * CPU * len(queues)
    usage_pct = 100.0 * sum(used_ms.values()) / (nominal_total * wall_ms)
    per_class: dict[str, dict[str, float]] = {}
    for k in CLASSES:
        waits = [admitted_at[w] - created[w] for w in klass_of if klass_of[w] is k]
        per_class[k.name] = {
            "count": len(waits),
            "mean_time_to_admission_s": round(sum(waits) / len(waits) / 1000.0, 2),
            "max_time_to_admission_s": round(max(waits) / 1000.0, 2),
        }
    return {
        "scale": scale,
        "workloads": len(klass_of),
        "wall_s": round(wall_ms / 1000.0, 2),
        "usage_pct": round(usage_pct, 1),
        "classes": per_class,
        "admissions": admissions,
        "evictions": evictions,
        "scheduler": "full recomputation" if full else "incremental",
        "schedule_calls": calls,
        "most_pending": most_pending,
        "schedule_ms_mean": round(1000.0 * schedule_s / calls, 2),
        "schedule_ms_p50": round(1000.0 * percentile(call_s, 50), 2),
        "schedule_ms_p99": round(1000.0 * percentile(call_s, 99), 2),
        "schedule_ms_max": round(1000.0 * max(call_s), 2),
        "scheduler_s_per_simulated_s": round(schedule_s / (wall_ms / 1000.0), 4),
        "replay_cpu_s": round(cpu_s, 2),
        "real_s": round(real_s, 2),
        "schedule_s": round(schedule_s, 2),
        "admissions_per_real_s": round(admissions / real_s, 1),
        "scheduler_cpu_ms_per_admission": round(1000.0 * schedule_s / admissions, 3),
    }


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of each class's count")
    ap.add_argument("--full", action="store_true", help="the full recomputation per call")
    args = ap.parse_args(argv)
    r = simulate(args.scale, args.full)
    ratios = {
        "wall": r["wall_s"] / KUEUE["wall_s"],
        "usage": r["usage_pct"] / KUEUE["usage_pct"],
        **{
            k: r["classes"][k]["mean_time_to_admission_s"] / KUEUE[k]
            for k in ("large", "medium", "small")
        },
    }
    rows = [
        headline("wall / Kueue mean (351 s)", round(ratios["wall"], 3)),
        headline("CQ usage / Kueue mean (55.9 %)", round(ratios["usage"], 3)),
        headline("large: mean wait / Kueue (16.5 s)", round(ratios["large"], 3)),
        headline("medium: mean wait / Kueue (76.8 s)", round(ratios["medium"], 3)),
        headline("small: mean wait / Kueue (215.5 s)", round(ratios["small"], 3)),
        headline("simulator admissions per real second", r["admissions_per_real_s"]),
        headline("scheduler call p50 (ms)", r["schedule_ms_p50"]),
        headline("scheduler call p99 (ms)", r["schedule_ms_p99"]),
        headline("scheduler s per simulated s", r["scheduler_s_per_simulated_s"]),
    ]
    note = (
        "Kueue's figures come from its scheduler running in real time against an API server"
        " (envtest): about 43 workloads/s end to end (K6), one head per ClusterQueue per"
        " cycle, each admission an API write. Its 351 s wall time is mostly that cadence,"
        " not quota: the workloads need 30 x 1,320 CPU-s = 39,600 CPU-s on 600 CPUs, 66 s"
        " at 100 % use. Here decisions take no virtual time and a call admits everything"
        " that fits, so the queues drain as fast as the quota allows: a shorter wall time,"
        " a higher usage and shorter waits are what the model predicts, and the ratios"
        " compare policy outcomes, not controller speed. The priority order between classes"
        " (large < medium < small waits) is the comparable part."
    )
    data = {
        "scenario": "kueue test/performance/scheduler/configs/baseline (anchors.md K2/K3)",
        "kueue_published_means": KUEUE,
        "result": r,
        "ratios_to_kueue": {k: round(v, 3) for k, v in ratios.items()},
        "note": note,
        "headlines": rows,
    }
    path = write_results(NAME + ("_full" if args.full else ""), data)
    print(
        f"Kueue baseline replay ({r['workloads']:,} workloads, 30 CQs, virtual clock):"
        f" {r['real_s']} s real, {r['schedule_calls']} calls to the {r['scheduler']} scheduler"
        f" ({r['schedule_ms_mean']} ms mean, at most {r['most_pending']:,} pending)"
    )
    print_headlines(rows)
    print(
        f"  wall {r['wall_s']} s (Kueue 351 s); usage {r['usage_pct']} % (Kueue 55.9 %);"
        f" evictions {r['evictions']}"
    )
    for k in ("large", "medium", "small"):
        c = r["classes"][k]
        print(
            f"  {k:<6}: mean time to admission {c['mean_time_to_admission_s']} s"
            f" (Kueue {KUEUE[k]} s), max {c['max_time_to_admission_s']} s"
        )
    print(f"  scheduler CPU per admission: {r['scheduler_cpu_ms_per_admission']} ms")
    print("  " + note)
    print(f"  results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
