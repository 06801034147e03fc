"""The engine's pass time with many runs in the store: linear in the active runs, flat in
the finished ones.

In this process: a real store (SQLite, WAL, ``synchronous=FULL``, in a temporary
directory), the real ``RunEngine`` with the internal admission strategy and the real
lifecycle decisions, and the fake executor (``taugrid.executors.fake``), whose attempts
are all running and report nothing new: a pass reads every active run, observes every
attempt, decides, follows its metrics, looks at restarts and the queue, and commits
nothing. That is the steady cost a pass pays per active run, without any process work.

Shapes: active runs A in {100, 1,000, 5,000} and finished runs F in {0, 10,000} (A + F up
to 15,000 rows; the issue asks for 10,000 runs in the store). Each shape: 5 warm-up
passes, then PASSES full passes timed (``perf_counter`` around ``engine.step()`` with
every active run to be reconciled, as each poll interval asks).

Baseline, the same process and the same store, interleaved pass for pass: the read every
pass has to make, the active rows with the columns the engine reads
(``RunStore.in_states([ADMITTED, RUNNING], light=True)``) -- the floor of a pass that
looks at every active run. Headlines: pass p50 per shape; pass / floor; the per-active-run
cost at A = 5,000 over A = 100 (1.0 is exactly linear); and with F = 10,000 over F = 0 at
the same A (1.0 is flat).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._common import headline, print_headlines, write_results
from taugrid.domain.lifecycle import Phase
from taugrid.domain.states import RunState
from taugrid.executors.fake import FakeAttempt, FakeExecutor
from taugrid.executors.local.artifacts import LocalArtifactStore
from taugrid.executors.local.layout import RunLayout
from taugrid.executors.local.secrets import LocalSecretStore
from taugrid.ports.devices import Gpu
from taugrid.ports.executor import AttemptKey, LaunchRequest
from taugrid.server.admission import InternalAdmission
from taugrid.server.engine import RunEngine
from taugrid.server.queueing import Machine, Queueing
from taugrid.store import RunStore, connect
from taugrid.store.policies import PolicyStore
from taugrid.store.tables import attempts, runs

NAME = "engine_pass"
PASSES = 30
ACTIVE = (100, 1000, 5000)
FINISHED = (0, 10_000)
S = RunState


def _row(run_id: str, state: RunState, now: float, seq: int) -> dict[str, Any]:
    return {
        "id": run_id,
        "name": run_id.rsplit("-", 1)[0],
        "workspace": "default",
        "queue": "default",
        "priority": "normal",
        "state": state.value,
        "reason": "Started" if state is S.RUNNING else "Completed",
        "message": "",
        "created_at": now,
        "updated_at": now,
        "started_at": now,
        "finished_at": None if state is S.RUNNING else now + 1,
        "exit_code": None if state is S.RUNNING else 0,
        "submitter": "ann",
        "spec_source": "tau.yaml",
        "spec_file_text": None,
        "spec_overrides": [],
        "spec_resolved": {"command": ["python", "train.py"], "restart": {"max": 0}},
        "spec_hash": "h" * 64,
        "snapshot_digest": "d" * 64,
        "env_summary": {"PATH": "/usr/bin"},
        "gpus": 0,
        "queued_seq": seq,
        "attempt_count": 1,
        "cluster_queue": "default",
        "priority_value": 100,
        "requests": {"gpu": 0, "cpu": 10, "memory": 0},
        "flavor": "default",
        "restarts": 0,
    }


def build(root: Path, active: int, finished: int) -> tuple[RunEngine, RunStore]:
    db = connect(f"sqlite:///{root / 'tau.db'}")
    store = RunStore(db)
    now = time.time()
    rows, atts = [], []
    for i in range(active + finished):
        state = S.RUNNING if i < active else S.SUCCEEDED
        rid = f"{'live' if state is S.RUNNING else 'done'}-{i:06d}"
        rows.append(_row(rid, state, now, i + 1))
        atts.append(
            {
                "run_id": rid,
                "attempt": 0,
                "created_at": now,
                "started_at": now,
                "placement": {"host": "local", "flavor": "default", "gpus": []},
                "attempt_dir": f"fake://{rid}/0",
            }
        )
    with db.begin() as conn:
        for i in range(0, len(rows), 1000):
            conn.execute(runs.insert(), rows[i : i + 1000])
            conn.execute(attempts.insert(), atts[i : i + 1000])
    machine = Machine((Gpu(0, "declared-0", "declared"),), 10**9, 1 << 40)
    queueing = Queueing(PolicyStore(db), machine, lambda: ["default"])
    executor = FakeExecutor()
    for row in rows[:active]:
        key = AttemptKey(row["id"], 0)
        req = LaunchRequest(row["id"], 0, "d" * 64, ["true"], None, {}, 1.0, None)
        executor.attempts[key] = FakeAttempt(req, phase=Phase.RUNNING, started_at=now)
    layout = RunLayout(root / "runs")
    engine = RunEngine(
        store,
        executor,
        InternalAdmission(queueing, store.gpus_in_use),
        artifacts=LocalArtifactStore(layout),
        secrets=LocalSecretStore(root / "secrets"),
        starts_inline=True,
    )
    return engine, store


def measure(active: int, finished: int, passes: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="tau-bench-pass-") as tmp:
        engine, store = build(Path(tmp), active, finished)
        for _ in range(5):
            engine.wake()
            engine.step()
        pass_s, floor_s = [], []
        for _ in range(passes):
            t0 = time.perf_counter()
            store.in_states([S.ADMITTED, S.RUNNING], light=True)
            floor_s.append(time.perf_counter() - t0)
            engine.wake()  # every active run is reconciled, as each poll interval asks
            t0 = time.perf_counter()
            engine.step()
            pass_s.append(time.perf_counter() - t0)
        moved = len(store.in_states([S.ADMITTED, S.RUNNING], light=True))
        assert moved == active, "a pass over running attempts changed their state"
        store.engine.dispose()
    p50 = statistics.median(pass_s)
    floor = statistics.median(floor_s)
    return {
        "active": active,
        "finished": finished,
        "pass_ms_p50": round(p50 * 1000, 2),
        "pass_ms_p90": round(sorted(pass_s)[int(0.9 * (len(pass_s) - 1))] * 1000, 2),
        "floor_ms_p50": round(floor * 1000, 2),
        "pass_over_floor": round(p50 / floor, 2),
        "us_per_active_run": round(p50 / active * 1e6, 1),
    }


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--passes", type=int, default=PASSES)
    args = ap.parse_args(argv)
    t_start = time.perf_counter()
    shapes = [measure(a, f, args.passes) for f in FINISHED for a in ACTIVE]
    by = {(s["active"], s["finished"]): s for s in shapes}
    lo, hi = min(ACTIVE), max(ACTIVE)
    linear = by[(hi, 0)]["us_per_active_run"] / by[(lo, 0)]["us_per_active_run"]
    flat = {a: by[(a, max(FINISHED))]["pass_ms_p50"] / by[(a, 0)]["pass_ms_p50"] for a in ACTIVE}
    rows = [
        headline(f"A={s['active']:,} F={s['finished']:,}: pass p50 (ms)", s["pass_ms_p50"])
        for s in shapes
    ]
    rows += [
        headline(f"A={hi:,} F=10,000: pass / floor", by[(hi, max(FINISHED))]["pass_over_floor"]),
        headline(
            f"per active run at A={hi:,} / at A={lo:,}",
            round(linear, 2),
            target="<= 1.2 (linear)",
            ok=linear <= 1.2,
        ),
        headline(
            "F=10,000 / F=0, worst A",
            round(max(flat.values()), 2),
            target="<= 1.1 (flat)",
            ok=max(flat.values()) <= 1.1,
        ),
    ]
    data = {
        "shapes": shapes,
        "flat_in_finished": {str(a): round(v, 3) for a, v in flat.items()},
        "linear_in_active": round(linear, 3),
        "passes": args.passes,
        "took_s": round(time.perf_counter() - t_start, 1),
        "headlines": rows,
    }
    path = write_results(NAME, data)
    print(f"engine pass time, {args.passes} passes per shape (fake executor, real SQLite)")
    print_headlines(rows)
    print(f"  results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
