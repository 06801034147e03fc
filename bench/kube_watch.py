"""Watch events processed per second with 1,000 live runs: the Kubernetes executor's
informer cache and Kueue admission source, against a bare informer with a counting
callback over the same stream.

``python -m bench.kube_watch [--quick]``. One kmock emulator on loopback (the test harness,
tests/kube_emulator.py) in this process's background thread holds 1,000 live attempts:
each its Job as ``KubernetesExecutor.launch`` renders it (admitted: not suspended), its
running pod (the Job controller's, with the template's labels) and its Kueue Workload
(owned by the Job, admitted), and the executor's ledger holds the 1,000 launches.

A round is one consumer, started fresh against those objects and synced (its first lists,
untimed), then a burst of status changes written by one coroutine on the emulator's loop,
as the controllers would write them: alternately a pod's (its Ready condition flips, with
a probe time) and a Workload's (its PodsReady condition flips), spread over the 1,000
runs. Every change alters its object, so every event is one change for a consumer to
process. The clock starts just before the first change is stored and stops when the
consumer has processed the last one.

- **ours**: a ``KubernetesExecutor`` with its ``ClusterCache`` (four informers: Jobs,
  RayJobs, pods, Workloads, as the server builds it) and its ``KueueAdmissionSource``; an
  event is processed when the cache has applied it, the admission source has looked at a
  Workload's change (its view and edges), and the executor has notified its attempt
  (``notify``: where the engine's ``attempt_reported`` is called in the server; here a
  counter that also parses the attempt back, as the engine does).
- **bare**: two ``informer.Informer`` (pods with TauGrid's label selector, Workloads),
  the same client class, callbacks that count.

Interleaved rounds (the order alternates), the emulator's request log emptied between
them. Headline: events/s of ours and bare (median over rounds) and ours / bare. The
emulator's side (serialising each event onto the watch stream) is in both figures: it
shares this process and its GIL, as the informers' decoding does.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench._common import headline, print_headlines, write_results
from bench._kube import (
    POD,
    WORKLOAD,
    KubeEmulator,
    executor,
    pod_of,
    pod_status,
    rendered_objects,
    resource_of,
    workload_of,
    workload_status,
)
from taugrid.executors.kubernetes.informer import Informer
from taugrid.executors.kubernetes.lightkube_client import LightkubeClient
from taugrid.manifests.workloads import MANAGED_BY

NAME = "kube_watch"
RUNS = 1000


class Counter:
    """Counts processed events; notes when the ``target``-th came."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.n = 0
        self.target = 0
        self.done_at = 0.0
        self.done = threading.Event()

    def expect(self, target: int) -> None:
        with self.lock:
            self.n, self.target, self.done_at = 0, target, 0.0
            self.done.clear()

    def __call__(self, *_: Any) -> None:
        with self.lock:
            self.n += 1
            if self.target and self.n == self.target:
                self.done_at = time.perf_counter()
                self.done.set()


def put_all(emulator: KubeEmulator, objs: list[dict[str, Any]]) -> float:
    """Store ``objs`` one after another on the emulator's loop, each published to its
    watchers as ``KubeEmulator.put`` does; the time just before the first."""
    emu = emulator.emulator
    assert emu is not None
    started = [0.0]

    async def put() -> None:
        started[0] = time.perf_counter()
        for obj in objs:
            meta = obj["metadata"]
            res = resource_of(obj["apiVersion"], obj["kind"])
            key = (res, meta.get("namespace"), meta["name"])
            async with emu._lock:
                existed = key in emu.objects and not emu.objects[key].deleted
                if key in emu.objects:
                    emu.objects[key].create(obj)
                else:
                    emu.objects[key] = obj
                raw = emu.objects[key].raw
                kind = "MODIFIED" if existed else "ADDED"
                await emu._buses[res].put({"type": kind, "object": raw})

    emulator._call(put, timeout=600)
    return started[0]


class World:
    """The emulator with RUNS live attempts, and the changes of the stream."""

    def __init__(self, emulator: KubeEmulator, tmp: Path) -> None:
        self.emulator = emulator
        self.tmp = tmp
        self.config = emulator.write_kubeconfig(tmp / "kubeconfig")
        self.state_dir = tmp / "state"
        ids = [f"live-{i:05d}" for i in range(RUNS)]
        jobs = [objs[-1] for objs in rendered_objects(ids, self.state_dir)]  # ledger too
        for job in jobs:
            job["spec"]["suspend"] = False  # admitted by Kueue
            job["metadata"]["uid"] = "uid-" + job["metadata"]["name"]
        self.pods = [pod_of(j) for j in jobs]
        self.workloads = [workload_of(j) for j in jobs]
        put_all(emulator, jobs + self.pods + self.workloads)
        self.seq = 0

    def stream(self, n: int) -> list[dict[str, Any]]:
        """The next ``n`` changes: a pod's, then a Workload's, run after run."""
        out = []
        for i in range(n):
            self.seq += 1
            run = (i // 2) % RUNS
            if i % 2 == 0:
                obj = {**self.pods[run], "status": pod_status(self.seq)}
            else:
                obj = {**self.workloads[run], "status": workload_status(self.seq)}
            out.append(obj)
        return out


def _quiet(emulator: KubeEmulator, kinds: list[tuple[str, str]]) -> None:
    """Until every consumer's watch of each kind receives changes, then a moment for the
    replayed ADDED events (no change to a synced cache) to be read."""
    for kind in kinds:
        emulator.wait_watchers(*kind, n=1, timeout=30)
    time.sleep(0.5)


def run_ours(world: World, events: list[dict[str, Any]]) -> dict[str, float]:
    client = LightkubeClient.from_kubeconfig(world.config)
    ex = executor(client, world.state_dir)
    counter = Counter()

    def notify(report: str) -> None:
        ex.attempt_of(report)  # what engine.attempt_reported does first
        counter()

    ex.notify = notify
    ex.start(sync_timeout_s=60)
    try:
        _quiet(world.emulator, [POD, WORKLOAD])
        assert len(ex.ledger.attempts()) == RUNS, "the ledger lost the launches"
        return _measure(world, events, counter, ex.cache.informers)
    finally:
        ex.close()


def run_bare(world: World, events: list[dict[str, Any]]) -> dict[str, float]:
    client = LightkubeClient.from_kubeconfig(world.config)
    counter = Counter()
    informers = [
        Informer(client, *POD, on_change=counter, labels=dict(MANAGED_BY)),
        Informer(client, *WORKLOAD, on_change=counter),
    ]
    for informer in informers:
        informer.start()
    try:
        for informer in informers:
            assert informer.wait_synced(60)
        _quiet(world.emulator, [POD, WORKLOAD])
        return _measure(world, events, counter, informers)
    finally:
        for informer in informers:
            informer.stop()
        client.close()


def _cpu(informers: list[Informer]) -> float:
    """CPU seconds the informers' threads have used (their own clocks)."""
    total = 0.0
    for informer in informers:
        thread = informer._thread
        assert thread is not None and thread.ident is not None
        total += time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
    return total


def _measure(
    world: World, events: list[dict[str, Any]], counter: Counter, informers: list[Informer]
) -> dict[str, float]:
    counter.expect(len(events))
    cpu0 = _cpu(informers)
    started = put_all(world.emulator, events)
    stored = time.perf_counter()
    if not counter.done.wait(120):
        raise TimeoutError(f"{counter.n} of {len(events)} events processed")
    took = counter.done_at - started
    cpu = _cpu(informers) - cpu0
    return {
        "events": len(events),
        "seconds": round(took, 4),
        "events_per_s": round(len(events) / took, 1),
        "consumer_cpu_us_per_event": round(cpu / len(events) * 1e6, 2),
        "emulator_store_s": round(stored - started, 4),
    }


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer rounds, a shorter stream")
    ap.add_argument("--rounds", type=int, default=None, help="rounds per consumer")
    ap.add_argument("--events", type=int, default=None, help="changes per round")
    args = ap.parse_args(argv)
    rounds = args.rounds or (2 if args.quick else 4)
    n_events = args.events or (2000 if args.quick else 6000)
    t_start = time.perf_counter()
    results: dict[str, list[dict[str, float]]] = {"ours": [], "bare": []}
    runners: dict[str, Callable[[World, list[dict[str, Any]]], dict[str, float]]] = {
        "ours": run_ours,
        "bare": run_bare,
    }
    with KubeEmulator() as emulator, tempfile.TemporaryDirectory(prefix="tau-bench-kw-") as tmp:
        t0 = time.perf_counter()
        world = World(emulator, Path(tmp))
        setup_s = time.perf_counter() - t0
        # Round -1 warms both up and is not counted.
        for r in range(-1, rounds):
            for who in ("ours", "bare") if r % 2 == 0 else ("bare", "ours"):
                emulator.forget_requests()
                res = runners[who](world, world.stream(n_events))
                if r >= 0:
                    results[who].append(res)
    ours = statistics.median(x["events_per_s"] for x in results["ours"])
    bare = statistics.median(x["events_per_s"] for x in results["bare"])
    ratio = ours / bare
    cpu = {
        who: statistics.median(x["consumer_cpu_us_per_event"] for x in results[who])
        for who in results
    }
    print(
        f"watch events processed, {RUNS:,} live runs, {n_events:,} changes a round, "
        f"{rounds} rounds each (setup {setup_s:.1f} s)"
    )
    for who in ("ours", "bare"):
        per = ", ".join(f"{x['events_per_s']:,.0f}" for x in results[who])
        us = ", ".join(f"{x['consumer_cpu_us_per_event']:.1f}" for x in results[who])
        print(f"  {who}: {per} events/s; informer threads' CPU per event {us} us")
    rows = [
        headline("ours: events/s (cache + admission source)", round(ours, 1)),
        headline("bare informer: events/s", round(bare, 1)),
        headline("ours / bare informer", round(ratio, 3)),
        headline("ours: informer CPU per event (us)", round(cpu["ours"], 1)),
        headline("bare: informer CPU per event (us)", round(cpu["bare"], 1)),
        headline("CPU per event, ours / bare", round(cpu["ours"] / cpu["bare"], 3)),
    ]
    print_headlines(rows)
    path = write_results(
        NAME,
        {
            "runs": RUNS,
            "events_per_round": n_events,
            "rounds": rounds,
            "rounds_detail": results,
            "setup_s": round(setup_s, 1),
            "took_s": round(time.perf_counter() - t_start, 1),
            "headlines": rows,
        },
    )
    print(f"  results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
