"""Scheduler decision time: 10,000 pending runs over 100 ClusterQueues in 10 cohorts.

``python -m bench.scheduler_decision``. Builds a policy with two GPU flavors per queue
(borrowing and lending limits on some queues, both queueing strategies, every preemption
setting), fills the queues to about 70 % with admitted runs, queues 10,000 runs (100 per
queue, mixed sizes, GPU types, priorities, users under per-user limits), then times
``schedule()`` over 30 cycles. Between cycles it does what the server does: applies the
admissions, marks victims as evicting, lets evicted runs and ~5 % of the others finish, and
tops the queue back up to 10,000, so every cycle has real decisions to make.

Headline: p50 and p99 decision time, as a ratio to the time to sort the same 10,000 pending
runs by (priority, creation time), measured in the same run: the part no scheduler can
avoid. Absolute milliseconds are reported next to it.
"""

from __future__ import annotations

import gc
import random
import statistics
import sys
import time
from dataclasses import replace
from typing import Any

from bench._common import headline, percentile, print_headlines, write_results
from taugrid.domain.quota import (
    Admitted,
    ClusterQueue,
    Flavor,
    FlavorQuotas,
    ReclaimWithinCohort,
    Resource,
    ResourceQuota,
    Snapshot,
    UserLimit,
    WithinClusterQueue,
    Workload,
)
from taugrid.domain.scheduling import queue_order, schedule

NAME = "scheduler_decision"
COHORTS, PER_COHORT, PENDING, CYCLES = 10, 10, 10_000, 30
GIB = 1 << 30
WITHIN: tuple[WithinClusterQueue, ...] = ("Never", "LowerPriority", "LowerOrNewerEqualPriority")
RECLAIM: tuple[ReclaimWithinCohort, ...] = ("Never", "LowerPriority", "Any")


def policy() -> tuple[dict[str, ClusterQueue], dict[str, Flavor]]:
    flavors = {"h100": Flavor("h100", "h100"), "a100": Flavor("a100", "a100")}
    queues = {}
    for c in range(COHORTS):
        for i in range(PER_COHORT):
            n = c * PER_COHORT + i
            borrow = 4 if n % 3 == 0 else None
            lend = 4 if n % 4 == 0 else None

            def res(gpus: int, borrow: int | None = borrow, lend: int | None = lend) -> Any:
                return {
                    "gpu": ResourceQuota(gpus, borrow, lend),
                    "cpu": ResourceQuota(gpus * 16_000),
                    "memory": ResourceQuota(gpus * 128 * GIB),
                }

            name = f"c{c}-q{i}"
            queues[name] = ClusterQueue(
                name,
                (FlavorQuotas("h100", res(8)), FlavorQuotas("a100", res(8))),
                f"cohort-{c}",
                "StrictFIFO" if n % 5 == 0 else "BestEffortFIFO",
                WITHIN[n % 3],
                RECLAIM[(n // 3) % 3],
            )
    return queues, flavors


class Load:
    def __init__(self, rng: random.Random, queues: dict[str, ClusterQueue]) -> None:
        self.rng = rng
        self.names = sorted(queues)
        self.seq = 0
        self.clock = 0.0

    def workload(self, queue: str) -> Workload:
        rng = self.rng
        self.seq += 1
        self.clock += 0.01
        gpus = rng.choice((1, 1, 1, 2, 2, 4, 8))
        req: dict[Resource, int] = {
            "gpu": gpus,
            "cpu": gpus * rng.choice((4_000, 8_000)),
            "memory": gpus * rng.choice((32, 64)) * GIB,
        }
        return Workload(
            f"run-{self.seq}",
            queue,
            f"ws{rng.randrange(10)}",
            f"user{rng.randrange(50)}",
            rng.choice((0, 0, 0, 10, 10, 100)),
            self.clock,
            req,
            rng.choice((None, None, "h100", "a100")),
        )

    def initial_admitted(self, queues: dict[str, ClusterQueue]) -> list[Admitted]:
        out = []
        for q in self.names:
            for flavor, target in (("h100", 6), ("a100", 5)):
                held = 0
                while True:
                    w = replace(self.workload(q), gpu_type=flavor)
                    gpus = w.requests["gpu"]
                    if held + gpus > target:
                        break
                    held += gpus
                    out.append(Admitted(w, flavor, self.clock))
        return out


def snapshot_cycles(seed: int = 7) -> tuple[list[float], list[float], dict[str, Any]]:
    rng = random.Random(seed)
    queues, flavors = policy()
    load = Load(rng, queues)
    limits = {f"ws{i}": UserLimit(max_running=4, max_gpus=16) for i in range(10)}
    admitted = load.initial_admitted(queues)
    pending = [load.workload(load.names[i % len(load.names)]) for i in range(PENDING)]
    decide_s: list[float] = []
    sort_s: list[float] = []
    totals = {"admissions": 0, "preemptions": 0, "pending_reasons": {}}
    reasons: dict[str, int] = totals["pending_reasons"]  # type: ignore[assignment]
    for _cycle in range(CYCLES):
        snap = Snapshot(queues, flavors, tuple(admitted), tuple(pending), limits)
        gc.collect()
        t0 = time.perf_counter()
        sorted(snap.pending, key=queue_order)
        t1 = time.perf_counter()
        d = schedule(snap)
        t2 = time.perf_counter()
        sort_s.append(t1 - t0)
        decide_s.append(t2 - t1)
        totals["admissions"] += len(d.admissions)  # type: ignore[operator]
        totals["preemptions"] += len(d.preemptions)  # type: ignore[operator]
        for p in d.pending.values():
            reasons[p.reason] = reasons.get(p.reason, 0) + 1
        # What the server does between cycles.
        victims = {p.victim_id: p.preemptor_id for p in d.preemptions}
        by_id = {w.id: w for w in pending}
        load.clock += 1.0
        kept = []
        for a in admitted:
            if a.evicting or rng.random() < 0.05:
                continue  # stopped (evicted) or finished
            if a.workload.id in victims:
                a = replace(a, evicting=True, preempted_by=victims[a.workload.id])
            kept.append(a)
        kept += [Admitted(by_id[x.workload_id], x.flavor, load.clock) for x in d.admissions]
        admitted = kept
        taken = {x.workload_id for x in d.admissions}
        pending = [w for w in pending if w.id not in taken]
        pending += [load.workload(rng.choice(load.names)) for _ in range(PENDING - len(pending))]
    return decide_s, sort_s, totals


def main() -> int:
    t_start = time.perf_counter()
    decide_s, sort_s, totals = snapshot_cycles()
    p50, p99 = percentile(decide_s, 50), percentile(decide_s, 99)
    base = statistics.median(sort_s)
    rows = [
        headline("decision p50 / sort of the pending runs", round(p50 / base, 1)),
        headline("decision p99 / sort of the pending runs", round(p99 / base, 1)),
        headline("decision p50 (ms)", round(p50 * 1000, 1)),
        headline("decision p99 (ms)", round(p99 * 1000, 1)),
    ]
    cycles = len(decide_s)
    data = {
        "setup": {
            "cluster_queues": COHORTS * PER_COHORT,
            "cohorts": COHORTS,
            "pending_per_cycle": PENDING,
            "cycles": cycles,
            "flavors": ["h100", "a100"],
            "resources": ["gpu", "cpu", "memory"],
            "admitted_load": "h100 6/8 and a100 5/8 GPUs per queue at the start",
        },
        "decision_ms": {
            "p50": round(p50 * 1000, 2),
            "p99": round(p99 * 1000, 2),
            "min": round(min(decide_s) * 1000, 2),
            "max": round(max(decide_s) * 1000, 2),
            "all": [round(x * 1000, 2) for x in decide_s],
        },
        "baseline_sort_ms": {"median": round(base * 1000, 3), "what": "sorted(pending, key)"},
        "ratio_p50_to_sort": round(p50 / base, 2),
        "ratio_p99_to_sort": round(p99 / base, 2),
        "per_cycle_mean": {
            "admissions": round(totals["admissions"] / cycles, 1),
            "preemptions": round(totals["preemptions"] / cycles, 1),
            "pending_reasons": {
                k: round(v / cycles, 1) for k, v in sorted(totals["pending_reasons"].items())
            },
        },
        "took_s": round(time.perf_counter() - t_start, 1),
        "headlines": rows,
    }
    path = write_results(NAME, data)
    print(f"scheduler decision time: {PENDING:,} pending, 100 queues, 10 cohorts, {cycles} cycles")
    print_headlines(rows)
    per = data["per_cycle_mean"]
    print(
        f"  per cycle: {per['admissions']} admissions, {per['preemptions']} preemptions;"
        f" pending reasons {per['pending_reasons']}"
    )
    print(f"  baseline: sorting the 10,000 pending runs takes {base * 1000:.2f} ms (median)")
    print(f"  results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
