"""Run every benchmark (each in its own process, one after another) and print one table.

``python -m bench.all [NAME ...]``. Exits 1 if a benchmark crashed; a missed target is
reported in the table, not as a failure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

from bench._common import REPO, RESULTS_DIR, fmt_value

BENCHMARKS = (
    "cli_startup",
    "submit_latency",
    "short_runs",
    "transitions",
    "crash_resume",
    "checkpoint_persist",
    "checkpoint_async",
    "isolation",
    "scheduler_decision",
    "scheduler_kueue_baseline",
    "engine_pass",
    "kube_submit",
    "kube_watch",
    "kube_engine_pass",
    "health_classify",
    "fault_resume",
    "metrics_scrape",
    "portal_render",
)


def main(argv: list[str]) -> int:
    names = argv or list(BENCHMARKS)
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(BENCHMARKS)}")
        return 2
    load = os.getloadavg()[0]
    cpus = os.cpu_count() or 1
    if load > cpus:
        print(f"warning: load average {load:.1f} on {cpus} CPUs; figures will be noisy\n")
    crashed = []
    table: list[tuple[str, dict[str, Any]]] = []
    for name in names:
        result = RESULTS_DIR / f"{name}.json"
        result.unlink(missing_ok=True)
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", f"bench.{name}"], cwd=REPO)
        took = time.monotonic() - t0
        if proc.returncode != 0 or not result.exists():
            crashed.append(name)
            print(f"{name}: FAILED (exit {proc.returncode}) after {took:.0f} s\n")
            continue
        print(f"  ({name} took {took:.0f} s)\n")
        data = json.loads(result.read_text())
        table += [(name, row) for row in data["headlines"]]
    print(f"{'benchmark':<17} {'headline':<46} {'value':>10}  {'target':<12} verdict")
    print("-" * 98)
    for name, row in table:
        verdict = {True: "ok", False: "MISSED", None: "-"}[row.get("ok")]
        print(
            f"{name:<17} {row['metric']:<46} {fmt_value(row['value']):>10}  "
            f"{row.get('target') or '-':<12} {verdict}"
        )
    for name in crashed:
        print(f"{name:<17} {'(crashed)':<46}")
    print(f"\nresults: {RESULTS_DIR}/<name>.json   method and figures: docs/benchmarks.md")
    return 1 if crashed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
