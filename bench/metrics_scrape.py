"""``GET /metrics`` with 10,000 runs in the store, and what the instruments cost a run.

Part 1, scrape: a real server (``python -m taugrid.server``, SQLite) whose store holds
10,000 finished runs (written straight into its database, over 4 workspaces, 3 queues and
the three end states) and, through the API, 1 running run holding its one GPU and 50 runs
queued behind it. Timed: ``GET /metrics`` over one keep-alive connection, from the
request sent to the last byte read (where Prometheus has its answer), SCRAPES times, with
its size. Baseline, interleaved one for one on the same connection: ``GET /healthz``,
whose answer counts the runs (one read over the whole table, a small JSON body): the
floor of a request that reads the store. Headlines: scrape p50 and p99 (target p99 under
100 ms on 2 cores), its size, scrape p50 over the baseline's.

Part 2, cost: submit -> RUNNING (as bench.submit_latency times it: the POST sent to a
``GET /api/v1/runs/{id}`` answering RUNNING, polled every 2 ms) on two servers side by
side, one with metrics on (the default) and one with ``--metrics off`` (no instrument at
all: no request timer, no engine observers), RUNS runs each, alternating server run for
run. Headline: p50 on over p50 off (target at most 1.05).
"""

from __future__ import annotations

import http.client
import random
import tempfile
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
    submit_body,
    timed_get,
    upload_snapshot,
    write_results,
)

NAME = "metrics_scrape"
STORED = 10_000
QUEUED = 50
SCRAPES = 300
RUNS = 300
WARMUP = 5
WORKLOAD = ["sleep", "0.05"]
TARGET_P99_MS = 100.0
TARGET_COST = 1.05


class Server(BenchServer):
    def __init__(self, name: str, *, gpus: int | None = None, metrics: str = "on") -> None:
        super().__init__(name, gpus=gpus)
        self.metrics = metrics

    def server_args(self) -> list[str]:
        return [*super().server_args(), "--metrics", self.metrics]


def seed_finished(db_path: Path, n: int) -> None:
    """``n`` finished runs, with an attempt each, written straight into the store."""
    from taugrid.store import connect
    from taugrid.store.tables import attempts, runs

    db = connect(f"sqlite:///{db_path}")
    rng = random.Random(7)
    now = time.time()
    rows, atts = [], []
    for i in range(n):
        state = rng.choice(("SUCCEEDED", "SUCCEEDED", "FAILED", "CANCELLED"))
        rid = f"done-{i:06d}"
        at = now - rng.uniform(0, 30 * 86400)
        rows.append(
            {
                "id": rid,
                "name": "done",
                "workspace": f"team-{i % 4}",
                "queue": ("default", "gpu", "batch")[i % 3],
                "priority": None,
                "state": state,
                "reason": "Completed",
                "message": "",
                "created_at": at,
                "updated_at": at + 60,
                "started_at": at + 1,
                "finished_at": at + 60,
                "exit_code": 0,
                "submitter": "bench",
                "spec_source": "tau.yaml",
                "spec_file_text": None,
                "spec_overrides": [],
                "spec_resolved": {"command": ["true"]},
                "spec_hash": "h" * 64,
                "snapshot_digest": "d" * 64,
                "env_summary": {},
                "gpus": 1,
                "queued_seq": i + 1,
                "attempt_count": 1,
                "priority_value": 0,
                "restarts": 0,
            }
        )
        atts.append(
            {
                "run_id": rid,
                "attempt": 0,
                "created_at": at,
                "started_at": at + 1,
                "finished_at": at + 60,
                "placement": {"host": "local", "gpus": [0]},
                "attempt_dir": f"/nowhere/{rid}",
            }
        )
    with db.begin() as conn:
        for i in range(0, n, 1000):
            conn.execute(runs.insert(), rows[i : i + 1000])
            conn.execute(attempts.insert(), atts[i : i + 1000])
    db.dispose()


def scrape_part() -> dict[str, Any]:
    with Server(f"{NAME}-scrape", gpus=1) as srv, tempfile.TemporaryDirectory() as cwd:
        api = srv.api()
        digest = upload_snapshot(api)
        hold_gpu(api, digest, Path(cwd))
        body = submit_body(["true"], digest, Path(cwd), ["resources.gpus=1", "name=waits"])
        for _ in range(QUEUED):
            api.submit(body, str(uuid.uuid4()))
        seed_finished(srv.db_path, STORED)
        host, port = srv.url.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        headers = {"Authorization": f"Bearer {srv.token}"}
        scrape, base, sizes = [], [], []
        for i in range(WARMUP + SCRAPES):
            took, size = timed_get(conn, "/metrics", headers)
            floor, _ = timed_get(conn, "/healthz", headers)
            if i >= WARMUP:
                scrape.append(took)
                base.append(floor)
                sizes.append(size)
        runs = api.request("GET", "/healthz")["runs"]
        conn.close()
        api.close()
    return {
        "runs_in_store": runs,
        "scrapes": SCRAPES,
        "scrape_ms": {"p50": ms(median(scrape)), "p99": ms(percentile(scrape, 99))},
        "healthz_ms": {"p50": ms(median(base)), "p99": ms(percentile(base, 99))},
        "scrape_bytes": int(median(sizes)),
        "ratio_scrape_p50_over_healthz_p50": round(median(scrape) / median(base), 2),
    }


def submit_to_running(api: Any, watcher: Any, body: dict[str, Any]) -> float:
    sent = time.time()
    run_id = api.submit(body, str(uuid.uuid4()))["run"]["id"]
    while True:
        state = watcher.get_run(run_id)["state"]
        if state == "RUNNING" or state in TERMINAL:
            seen = time.time()
            break
        time.sleep(0.002)
    while api.get_run(run_id)["state"] not in TERMINAL:
        time.sleep(0.01)
    return seen - sent


def cost_part() -> dict[str, Any]:
    with (
        Server(f"{NAME}-on", metrics="on") as on,
        Server(f"{NAME}-off", metrics="off") as off,
        tempfile.TemporaryDirectory() as cwd,
    ):
        sides = {}
        for label, srv in (("on", on), ("off", off)):
            api, watcher = srv.api(), srv.api()
            digest = upload_snapshot(api)
            body = submit_body(WORKLOAD, digest, Path(cwd), ["name=cost"])
            sides[label] = (api, watcher, body)
        took: dict[str, list[float]] = {"on": [], "off": []}
        for i in range(WARMUP + RUNS):
            order = ("on", "off") if i % 2 == 0 else ("off", "on")
            for label in order:
                api, watcher, body = sides[label]
                t = submit_to_running(api, watcher, body)
                if i >= WARMUP:
                    took[label].append(t)
        for api, watcher, _ in sides.values():
            api.close()
            watcher.close()
    p50_on, p50_off = median(took["on"]), median(took["off"])
    return {
        "runs_each": RUNS,
        "workload": WORKLOAD,
        "metrics_on_ms": {"p50": ms(p50_on), "p99": ms(percentile(took["on"], 99))},
        "metrics_off_ms": {"p50": ms(p50_off), "p99": ms(percentile(took["off"], 99))},
        "ratio_p50_on_over_off": round(p50_on / p50_off, 3),
    }


def main() -> int:
    scrape = scrape_part()
    cost = cost_part()
    p99 = scrape["scrape_ms"]["p99"]
    ratio = cost["ratio_p50_on_over_off"]
    rows = [
        headline("metrics scrape p50 ms (10k runs)", scrape["scrape_ms"]["p50"]),
        headline(
            "metrics scrape p99 ms (10k runs)",
            p99,
            target=f"< {TARGET_P99_MS:.0f}",
            ok=p99 < TARGET_P99_MS,
        ),
        headline("metrics scrape size bytes", scrape["scrape_bytes"]),
        headline("scrape p50 / healthz p50", scrape["ratio_scrape_p50_over_healthz_p50"]),
        headline(
            "submit->running p50 metrics on / off",
            ratio,
            target=f"<= {TARGET_COST}",
            ok=ratio <= TARGET_COST,
        ),
    ]
    write_results(NAME, {"scrape": scrape, "cost": cost, "headlines": rows})
    print_headlines(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
