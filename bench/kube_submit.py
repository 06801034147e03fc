"""Submit -> the attempt's objects created on the cluster, against a bare lightkube create
of the same objects.

``python -m bench.kube_submit [--quick]``. One kmock emulator on loopback (the test
harness, tests/kube_emulator.py) in this process's background thread. Two parts:

(a) **launch**: ``KubernetesExecutor.launch(req)`` for a realistic request (built as the
attempt starter builds it: ``server.launching.launch_request`` from a run row with a
resolved spec, the pod's paths, no placement yet; the built-in policy, ``ClusterTarget()``
defaults): render (spec validation, placement, the code token), the creates (Secret,
then Job, through ``LightkubeClient``), the ledger entry (written and fsynced, its
directory fsynced). Baseline: a bare ``lightkube.Client.create`` of the exact same
object list (captured from a launch with a recording client, turned into lightkube
models before the clock starts), from the same kubeconfig. Interleaved rounds (the order
alternates each round); the emulator's request log is emptied after every sample and its
store between rounds (kmock scans both per request). Also timed in the same rounds, for
where the time goes: the render alone (``preview``) and a ledger entry alone.

(b) **what a user sees**: a private ``python -m taugrid.server --executor kubernetes
--kubeconfig K`` (its informers watching the emulator), one run at a time: from just
before ``POST /api/v1/runs`` to the moment the emulator stored the run's Job (stamped on
the emulator's own event loop when it publishes the Job's ADDED event). That includes the
HTTP submit, its durable SQLite commit, the engine's pass that hands the queued run's
attempt to the starter (``_submit_ahead``: Kueue admits objects it sees) and the launch.
Baseline, interleaved one for one: the bare create of the same two objects. Each run is
cancelled afterwards and its objects waited away, so the store does not grow.

Headlines: launch p50 / bare p50 and p99 / p99 (target <= 1.5), and the user's submit ->
Job visible p50 and p99, with their ratio to the bare create.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightkube
from lightkube.codecs import from_dict

from bench._common import (
    headline,
    percentile,
    print_headlines,
    submit_body,
    upload_snapshot,
    write_results,
)
from bench._kube import (
    JOB,
    ClusterServer,
    KubeEmulator,
    executor,
    job_added_times,
    rendered_objects,
    request,
)
from taugrid.executors.kubernetes.ledger import LaunchLedger
from taugrid.executors.kubernetes.lightkube_client import LightkubeClient
from taugrid.manifests.workloads import MANAGED_BY
from taugrid.ports.executor import AttemptKey

NAME = "kube_submit"
OURS, BARE = "KubernetesExecutor.launch", "lightkube.Client.create x2"
RENDER, LEDGER = "render only (preview)", "ledger entry only (fsync)"
TARGET = 1.5
OVERRIDES = [
    "name=train",
    "image=python:3.12-slim",
    "resources.cpus=1",
    "resources.memory=1Gi",
    "restart.max=2",
]


def _timed(fn: Callable[[], Any]) -> tuple[float, float]:
    w0, c0 = time.perf_counter(), time.thread_time()
    fn()
    return time.perf_counter() - w0, time.thread_time() - c0


def _bare(objs: list[dict[str, Any]]) -> list[Any]:
    return [from_dict(o) for o in objs]


def measure_launch(rounds: int, per_round: int, tmp: Path) -> dict[str, dict[str, list[float]]]:
    names = (OURS, BARE, RENDER, LEDGER)
    samples: dict[str, dict[str, list[float]]] = {n: {"wall": [], "cpu": []} for n in names}
    with KubeEmulator() as emulator:
        config = emulator.write_kubeconfig(tmp / "kubeconfig")
        client = LightkubeClient.from_kubeconfig(config)
        ours = executor(client, tmp / "state")  # informers not started: launch alone
        bare = lightkube.Client(
            config=lightkube.KubeConfig.from_file(config), field_manager="taugrid"
        )
        scratch = LaunchLedger(tmp / "scratch-ledger" / "attempts")
        try:
            for r in range(-1, rounds):  # round -1 warms everything up and is not counted
                ids = {
                    who: [f"{who[:1].lower()}{r + 1:02d}-{i:03d}" for i in range(per_round)]
                    for who in (OURS, BARE)
                }
                reqs = [request(rid) for rid in ids[OURS]]
                models = [
                    _bare(objs) for objs in rendered_objects(ids[BARE], tmp / f"render-{r + 1}")
                ]
                order = (OURS, BARE) if r % 2 == 0 else (BARE, OURS)
                for i in range(per_round):
                    for who in order:
                        if who == OURS:
                            req = reqs[i]
                            wall, cpu = _timed(lambda req=req: ours.launch(req))
                        else:
                            objs = models[i]
                            wall, cpu = _timed(lambda objs=objs: [bare.create(o) for o in objs])
                        emulator.forget_requests()
                        if r >= 0:
                            samples[who]["wall"].append(wall)
                            samples[who]["cpu"].append(cpu)
                    req = reqs[i]
                    key = AttemptKey(f"s{r + 1:02d}-{i:03d}", 0)
                    for who, fn in (
                        (RENDER, lambda req=req: ours.preview(req)),
                        (LEDGER, lambda key=key: scratch.record(key, "Job", "default", "x")),
                    ):
                        wall, cpu = _timed(fn)
                        if r >= 0:
                            samples[who]["wall"].append(wall)
                            samples[who]["cpu"].append(cpu)
                emulator.clear()
        finally:
            client.close()
            bare.close()
    return samples


def _wait(
    what: str, check: Callable[[], bool], timeout: float = 15.0, poll: float = 0.0005
) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(poll)


def measure_user(runs: int, warmups: int, tmp: Path) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"visible": [], "ack": [], "bare": []}
    with KubeEmulator() as emulator:
        seen = job_added_times(emulator)
        bare = lightkube.Client(
            config=lightkube.KubeConfig.from_file(emulator.write_kubeconfig(tmp / "kc-bare")),
            field_manager="taugrid",
        )
        ids = [f"ub-{i:03d}" for i in range(runs + warmups)]
        # The server would take objects with TauGrid's labels for what a crashed launch
        # left (``retain`` deletes them): the baseline's say they are someone else's.
        models = [
            _bare([_not_ours(o) for o in objs])
            for objs in rendered_objects(ids, tmp / "render-user")
        ]
        workdir = tmp / "workdir"
        workdir.mkdir()
        (workdir / "train.py").write_text("print('hello')\n")
        try:
            with ClusterServer("kube-submit", emulator) as server:
                api = server.api()
                body = submit_body(["python", "train.py"], upload_snapshot(api), workdir, OVERRIDES)
                for i in range(runs + warmups):
                    counted = i >= warmups
                    order = ("user", "bare") if i % 2 == 0 else ("bare", "user")
                    run_id = job = ""
                    for who in order:
                        if who == "bare":
                            objs = models[i]
                            wall, _ = _timed(lambda objs=objs: [bare.create(o) for o in objs])
                            if counted:
                                out["bare"].append(wall)
                            continue
                        t0 = time.perf_counter()
                        run_id = api.submit(body, f"bench-kube-{i}")["run"]["id"]
                        acked = time.perf_counter()
                        job = f"{run_id}-a0"
                        _wait(f"Job {job}", lambda job=job: job in seen)
                        if counted:
                            out["ack"].append(acked - t0)
                            out["visible"].append(seen[job] - t0)
                    # Tidy up untimed: the run's objects go (cancel: the engine deletes
                    # them), and the baseline's.
                    api.cancel(run_id)
                    for o in models[i]:
                        bare.delete(type(o), o.metadata.name, namespace=o.metadata.namespace)
                    _wait(
                        f"{job}'s objects deleted",
                        lambda job=job: (
                            emulator.get(*JOB, "default", job) is None
                            and emulator.get("v1", "Secret", "default", f"{job}-code") is None
                        ),
                        poll=0.005,
                    )
                    emulator.forget_requests()
                api.close()
        finally:
            bare.close()
    return out


def _not_ours(obj: dict[str, Any]) -> dict[str, Any]:
    for meta in (obj["metadata"], obj.get("spec", {}).get("template", {}).get("metadata", {})):
        labels = meta.get("labels") or {}
        for k in MANAGED_BY:
            if k in labels:
                labels[k] = "bench"
    return obj


def _pcts(values: list[float]) -> dict[str, float]:
    return {q: round(percentile(values, float(q[1:])) * 1e3, 3) for q in ("p50", "p90", "p99")}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer rounds and runs (~15 s)")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--per-round", type=int, default=None)
    ap.add_argument("--runs", type=int, default=None, help="user submits in part (b)")
    args = ap.parse_args(argv)
    rounds = args.rounds or (4 if args.quick else 10)
    per_round = args.per_round or (20 if args.quick else 40)
    runs = args.runs or (30 if args.quick else 100)
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tau-bench-kube-submit-") as tmp_s:
        tmp = Path(tmp_s)
        (tmp / "a").mkdir()
        (tmp / "b").mkdir()
        launch = measure_launch(rounds, per_round, tmp / "a")
        user = measure_user(runs, 3, tmp / "b")

    figures: dict[str, dict[str, float]] = {}
    print(f"(a) launch, {rounds} interleaved rounds x {per_round} (one emulator, in-process)")
    for name, s in launch.items():
        f = figures[name] = {
            **{f"wall_{k}_ms": v for k, v in _pcts(s["wall"]).items()},
            **{f"cpu_{k}_ms": v for k, v in _pcts(s["cpu"]).items()},
        }
        print(
            f"  {name:30} wall p50 {f['wall_p50_ms']:7.3f} ms  p99 {f['wall_p99_ms']:7.3f} ms"
            f"   this thread's CPU p50 {f['cpu_p50_ms']:7.3f} ms   (n={len(s['wall'])})"
        )
    p50 = figures[OURS]["wall_p50_ms"] / figures[BARE]["wall_p50_ms"]
    p99 = figures[OURS]["wall_p99_ms"] / figures[BARE]["wall_p99_ms"]
    u = {k: _pcts(v) for k, v in user.items()}
    print(
        f"(b) {runs} submits one at a time to a cluster-mode server, interleaved with bare creates"
    )
    for k, label in (
        ("visible", "POST /runs -> Job stored in the emulator"),
        ("ack", "POST /runs answered"),
        ("bare", "bare create of Secret + Job"),
    ):
        print(
            f"  {label:42} p50 {u[k]['p50']:7.2f} ms"
            f"  p90 {u[k]['p90']:7.2f}  p99 {u[k]['p99']:7.2f}"
        )
    up50 = u["visible"]["p50"] / u["bare"]["p50"]
    up99 = u["visible"]["p99"] / u["bare"]["p99"]
    rows = [
        headline(
            "launch p50 / bare create p50", round(p50, 3), target=f"<= {TARGET}", ok=p50 <= TARGET
        ),
        headline(
            "launch p99 / bare create p99", round(p99, 3), target=f"<= {TARGET}", ok=p99 <= TARGET
        ),
        headline("launch p50 (ms)", figures[OURS]["wall_p50_ms"]),
        headline("user: POST -> Job visible p50 (ms)", u["visible"]["p50"]),
        headline("user: POST -> Job visible p99 (ms)", u["visible"]["p99"]),
        headline("user p50 / bare create p50", round(up50, 2)),
        headline("user p99 / bare create p99", round(up99, 2)),
    ]
    print_headlines(rows)
    path = write_results(
        NAME,
        {
            "rounds": rounds,
            "per_round": per_round,
            "runs": runs,
            "launch": figures,
            "user": u,
            "samples": {"launch": launch, "user": user},
            "took_s": round(time.perf_counter() - t_start, 1),
            "headlines": rows,
        },
    )
    print(f"  results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
