"""The engine's pass in cluster mode as the active runs grow from 100 to 10,000: it must
grow no worse than linearly.

``python -m bench.kube_engine_pass [--quick]``. In this process, no HTTP: a real store
(SQLite, WAL, ``synchronous=FULL``, in a temporary directory) with N runs RUNNING, the
real ``RunEngine`` with the cluster's admission strategy (``ObservedAdmission`` over the
executor's ``KueueAdmissionSource``, as ``server/app.py`` builds it) and a
``KubernetesExecutor`` over an in-memory client (nothing is created or listed): its
ledger holds the N launches and its informer cache is filled through the cache's own
callbacks with the WatchEvents the informers would deliver, per run: the Job as
``launch`` renders it (admitted, so not suspended), its running pod and its admitted
Kueue Workload. The admission events of that first fill (a server start's) are drained
before measuring: the steady state.

A full pass (``engine.wake()``: every active run reconciled and the admission cycle run,
as each poll interval asks) reads the active runs, asks the ledger and observes every
attempt from the cache (``observe.observe``), decides, runs the admission cycle (which in
cluster mode also launches queued runs' attempts ahead and asks the executor to
``retain`` the wanted ones), and commits nothing. Shapes N in {100, 1,000, 10,000}; 3
warm-up passes, then PASSES timed (``perf_counter`` around ``engine.step()``).

Baseline, interleaved pass for pass: the read every such pass must make
(``RunStore.in_states([ADMITTED, RUNNING], light=True)``), as in ``bench.engine_pass``.
Headlines: pass p50 and per-run time per shape, and per-run(10,000) / per-run(100)
(1.0: exactly linear; gate 1.2).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import json
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._common import headline, print_headlines, write_results
from bench._kube import (
    RecordingClient,
    executor,
    pod_of,
    rendered_objects,
    run_row,
    workload_of,
)
from taugrid.domain.states import RunState
from taugrid.executors.kubernetes.artifacts import PodArtifacts
from taugrid.executors.kubernetes.client import WatchEvent
from taugrid.executors.kubernetes.executor import KubernetesExecutor
from taugrid.executors.local.artifacts import LocalArtifactStore
from taugrid.executors.local.layout import RunLayout
from taugrid.executors.local.secrets import LocalSecretStore
from taugrid.server.admission import ObservedAdmission
from taugrid.server.engine import RunEngine
from taugrid.store import RunStore, connect
from taugrid.store.tables import attempts, runs

NAME = "kube_engine_pass"
SHAPES = (100, 1000, 10_000)
PASSES = {100: 30, 1000: 30, 10_000: 12}
GATE = 1.2
TEMPLATE = "tmpl-000000"
_SHM = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
S = RunState


def _row(run_id: str, now: float, seq: int) -> dict[str, Any]:
    spec = run_row(run_id)["spec_resolved"]
    return {
        "id": run_id,
        "name": "train",
        "workspace": "default",
        "queue": "default",
        "priority": "normal",
        "state": S.RUNNING.value,
        "reason": "Started",
        "message": "",
        "created_at": now,
        "updated_at": now,
        "started_at": now,
        "finished_at": None,
        "exit_code": None,
        "submitter": "ann",
        "spec_source": "tau.yaml",
        "spec_file_text": None,
        "spec_overrides": [],
        "spec_resolved": spec,
        "spec_hash": "h" * 64,
        "snapshot_digest": "d" * 64,
        "env_summary": {"PATH": "/usr/bin"},
        "gpus": 0,
        "queued_seq": seq,
        "attempt_count": 1,
        "cluster_queue": "default",
        "priority_value": 1000,
        "requests": {"gpu": 0, "cpu": 1000, "memory": 1 << 30},
        "flavor": "local",
        "restarts": 0,
    }


def build(root: Path, n: int) -> tuple[RunEngine, RunStore, KubernetesExecutor]:
    db = connect(f"sqlite:///{root / 'tau.db'}")
    store = RunStore(db)
    now = time.time()
    ids = [f"live-{i:06d}" for i in range(n)]
    rows = [_row(rid, now, i + 1) for i, rid in enumerate(ids)]
    atts = [
        {
            "run_id": rid,
            "attempt": 0,
            "created_at": now,
            "started_at": now,
            "placement": {"host": "default", "flavor": "local", "gpus": []},
            "attempt_dir": f"k8s://default/job/{rid}-a0",
        }
        for rid in ids
    ]
    with db.begin() as conn:
        for i in range(0, n, 1000):
            conn.execute(runs.insert(), rows[i : i + 1000])
            conn.execute(attempts.insert(), atts[i : i + 1000])
    # The ledger as launches leave it (one small file per attempt, written here without
    # the fsyncs only a launch pays; on a tmpfs where there is one: creating 10,000 files
    # in this VM's /tmp takes ~10 s), loaded by the executor when it is made.
    state = Path(tempfile.mkdtemp(prefix="tau-bench-kpass-", dir=_SHM)) / "kubernetes"
    ledger_dir = state / "attempts"
    ledger_dir.mkdir(parents=True)
    for rid in ids:
        body = {"kind": "Job", "namespace": "default", "name": f"{rid}-a0", "launched_at": now}
        (ledger_dir / f"{rid}.0.json").write_text(json.dumps({**body, "stop": None}))
    ex = executor(RecordingClient(), state)
    shutil.rmtree(state.parent)
    assert len(ex.ledger.attempts()) == n, "the ledger did not load the launches"
    # What the informers deliver for each live attempt, through the cache's callbacks.
    (job,) = (objs[-1] for objs in rendered_objects([TEMPLATE], root / "tmpl"))
    job["spec"]["suspend"] = False
    job["metadata"]["uid"] = f"uid-{TEMPLATE}-a0"
    job["status"] = {"active": 1, "ready": 1, "startTime": "2026-12-02T13:00:00Z"}
    # Each run's objects decoded from JSON of their own, as an informer delivers them
    # (no parts shared between runs: the heap the garbage collector walks is a server's).
    texts = [json.dumps(obj) for obj in (job, pod_of(job), workload_of(job))]
    callbacks = (ex.cache._workload_object, ex.cache._pod, ex.cache._kueue_workload)
    for rid in ids:
        for text, callback in zip(texts, callbacks, strict=True):
            callback(WatchEvent("ADDED", json.loads(text.replace(TEMPLATE, rid))))
    assert {k.run_id for k in ex.cache.attempts()} == set(ids)
    ex.admission.drain()  # the first list's admissions: a server start's, not the steady state
    layout = RunLayout(root / "runs")
    engine = RunEngine(
        store,
        ex,
        ObservedAdmission(ex.admission, "Kueue", explain=ex.admission.pending),
        artifacts=PodArtifacts(LocalArtifactStore(layout)),
        secrets=LocalSecretStore(root / "secrets"),
        starts_inline=True,
    )
    ex.notify = engine.attempt_reported
    ex.admission.wake = engine.wake
    return engine, store, ex


def _pass(engine: RunEngine, no_gc: bool = False) -> float:
    engine.wake()  # every active run reconciled, the admission cycle run
    if no_gc:
        gc.disable()
    t0 = time.perf_counter()
    engine.step()
    took = time.perf_counter() - t0
    gc.enable()
    return took


def measure(
    passes: dict[int, int], profile: bool = False, no_gc: bool = False
) -> list[dict[str, Any]]:
    """Every shape built side by side, then their passes interleaved round-robin (the
    order rotating), so that the machine's moods hit every shape alike."""
    with contextlib.ExitStack() as stack:
        worlds, built = {}, {}
        for n in passes:
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="tau-bench-kpass-"))
            t0 = time.perf_counter()
            worlds[n] = build(Path(tmp), n)
            built[n] = time.perf_counter() - t0
            for _ in range(3):
                _pass(worlds[n][0])
        # As the cluster server does once its informers have listed (server/cluster.py):
        # what the caches hold is kept out of the collector's full collections.
        gc.freeze()
        pass_s: dict[int, list[float]] = {n: [] for n in passes}
        floor_s: dict[int, list[float]] = {n: [] for n in passes}
        order = list(passes)
        for r in range(max(passes.values())):
            for n in order[r % len(order) :] + order[: r % len(order)]:
                if len(pass_s[n]) >= passes[n]:
                    continue
                engine, store, _ex = worlds[n]
                t0 = time.perf_counter()
                store.in_states([S.ADMITTED, S.RUNNING], light=True)
                floor_s[n].append(time.perf_counter() - t0)
                pass_s[n].append(_pass(engine, no_gc))
        out = []
        for n, (engine, store, _ex) in worlds.items():
            if profile:
                path = Path(tempfile.gettempdir()) / f"kube_engine_pass-{n}.prof.txt"
                prof = cProfile.Profile()
                prof.enable()
                for _ in range(3):
                    _pass(engine)
                prof.disable()
                with path.open("w") as f:
                    pstats.Stats(prof, stream=f).sort_stats("tottime").print_stats(40)
                print(f"  profile of N={n:,}: {path}")
            left = store.in_states([S.ADMITTED, S.RUNNING], light=True)
            assert len(left) == n, "a pass over running attempts changed their state"
            assert engine.progress.get(left[0]["id"], "").startswith("running"), engine.progress
            store.engine.dispose()
            out.append(_figures(n, pass_s[n], floor_s[n], built[n]))
    return out


def _figures(n: int, pass_s: list[float], floor_s: list[float], built: float) -> dict[str, Any]:
    p50 = statistics.median(pass_s)
    floor = statistics.median(floor_s)
    return {
        "runs": n,
        "passes": len(pass_s),
        "build_s": round(built, 2),
        "pass_ms_p50": round(p50 * 1000, 2),
        "pass_ms_p90": round(sorted(pass_s)[int(0.9 * (len(pass_s) - 1))] * 1000, 2),
        "floor_ms_p50": round(floor * 1000, 2),
        "pass_over_floor": round(p50 / floor, 2),
        "us_per_run": round(p50 / n * 1e6, 1),
        "floor_us_per_run": round(floor / n * 1e6, 1),
        "pass_ms": [round(x * 1000, 2) for x in pass_s],
    }


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a third of the passes")
    ap.add_argument("--profile", action="store_true", help="cProfile 3 passes per shape")
    ap.add_argument(
        "--no-gc", action="store_true", help="the garbage collector off during timed passes"
    )
    args = ap.parse_args(argv)
    t_start = time.perf_counter()
    passes = {n: max(5, PASSES[n] // 3) if args.quick else PASSES[n] for n in SHAPES}
    shapes = measure(passes, args.profile, args.no_gc)
    by = {s["runs"]: s for s in shapes}
    lo, hi = min(SHAPES), max(SHAPES)
    linear = by[hi]["us_per_run"] / by[lo]["us_per_run"]
    mid = SHAPES[1]
    upper = by[hi]["us_per_run"] / by[mid]["us_per_run"]
    floor_upper = by[hi]["floor_us_per_run"] / by[mid]["floor_us_per_run"]
    rows = []
    for s in shapes:
        rows.append(headline(f"N={s['runs']:,}: pass p50 (ms)", s["pass_ms_p50"]))
        rows.append(headline(f"N={s['runs']:,}: per run (us)", s["us_per_run"]))
    rows.append(headline(f"N={hi:,}: pass p90 (ms)", by[hi]["pass_ms_p90"]))
    rows += [
        headline(f"N={hi:,}: pass / floor", by[hi]["pass_over_floor"]),
        headline(
            f"per run at N={hi:,} / at N={lo:,}",
            round(linear, 2),
            target=f"<= {GATE} (linear)",
            ok=linear <= GATE,
        ),
        headline(f"per run at N={hi:,} / at N={mid:,}", round(upper, 2)),
        headline(f"floor per run at N={hi:,} / at N={mid:,}", round(floor_upper, 2)),
    ]
    data = {
        "shapes": shapes,
        "linear": round(linear, 3),
        "gc_off_in_passes": args.no_gc,
        "took_s": round(time.perf_counter() - t_start, 1),
        "headlines": rows,
    }
    path = write_results(NAME, data)
    print("engine pass time in cluster mode (KubernetesExecutor, cache filled, real SQLite)")
    for s in shapes:
        print(
            f"  N={s['runs']:>6,}: pass p50 {s['pass_ms_p50']:8.2f} ms (p90 {s['pass_ms_p90']:.2f})"
            f"  floor {s['floor_ms_p50']:7.2f} ms  {s['us_per_run']:6.1f} us/run"
            f"  ({s['passes']} passes, built in {s['build_s']} s)"
        )
    print_headlines(rows)
    print(f"  results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
