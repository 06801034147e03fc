"""What TauGrid's Kubernetes client costs per create, against lightkube's own client.

``python -m bench.kube_client [ROUNDS] [PER_ROUND]``. One kmock emulator on loopback
(tests/kube_emulator.py, the test harness) in this process's background thread; the same
batch/v1 Job (only its name varies) created through ``LightkubeClient.create`` (a dict in,
a dict out: JSON, verb-aware retries, error mapping) and through a bare
``lightkube.Client.create`` (a ``Job`` model in, a model out), both from the same
kubeconfig, in interleaved rounds (the order alternates per round; the store is emptied
between rounds, and its request log after each create: kmock scans both per request).
The bare client's
models are built before the clock starts: its figure is the create alone.

Prints p50 and p99 per create for each, wall time and the calling thread's CPU time (the
client's own work: the emulator runs on another thread), and the ratios ours / bare. Most
of the wall time is the emulator (aiohttp in the same process, same GIL). Not part of
``bench.all``: a figure for the record, no target.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightkube
from lightkube.codecs import from_dict

from bench._common import REPO, headline, percentile, print_headlines, write_results
from taugrid.executors.kubernetes.lightkube_client import LightkubeClient

sys.path.insert(0, str(REPO / "tests"))
from kube_emulator import KubeEmulator, sample

NAME = "kube_client"
OURS, BARE = "LightkubeClient.create", "lightkube.Client.create"


def job(name: str) -> dict[str, Any]:
    return sample("Job", name, labels={"taugrid.io/managed-by": "taugrid"})


def timed(create: Callable[[Any], Any], obj: Any) -> tuple[float, float]:
    """Wall and this thread's CPU seconds of one create (the emulator's thread is apart)."""
    w0, c0 = time.perf_counter(), time.thread_time()
    create(obj)
    return time.perf_counter() - w0, time.thread_time() - c0


def measure(rounds: int, per_round: int) -> dict[str, dict[str, list[float]]]:
    samples: dict[str, dict[str, list[float]]] = {
        name: {"wall": [], "cpu": []} for name in (OURS, BARE)
    }
    with KubeEmulator() as emulator, tempfile.TemporaryDirectory() as tmp:
        config = emulator.write_kubeconfig(Path(tmp) / "kubeconfig")
        ours = LightkubeClient.from_kubeconfig(config)
        bare = lightkube.Client(
            config=lightkube.KubeConfig.from_file(config), field_manager="taugrid"
        )
        try:
            for r in range(-1, rounds):  # round -1 warms both up and is not counted
                for who in (OURS, BARE) if r % 2 == 0 else (BARE, OURS):
                    if who == OURS:
                        create, objs = ours.create, [job(f"o-{r}-{i}") for i in range(per_round)]
                    else:
                        create = bare.create
                        objs = [from_dict(job(f"b-{r}-{i}")) for i in range(per_round)]
                    for obj in objs:
                        wall, cpu = timed(create, obj)
                        emulator.forget_requests()
                        if r >= 0:
                            samples[who]["wall"].append(wall)
                            samples[who]["cpu"].append(cpu)
                emulator.clear()
        finally:
            ours.close()
            bare.close()
    return samples


def main(argv: list[str]) -> int:
    rounds = int(argv[0]) if argv else 20
    per_round = int(argv[1]) if len(argv) > 1 else 50
    samples = measure(rounds, per_round)
    figures: dict[str, dict[str, float]] = {}
    for name, s in samples.items():
        figures[name] = {
            f"{what}_{q}_ms": round(percentile(s[what], float(q[1:])) * 1e3, 4)
            for what in ("wall", "cpu")
            for q in ("p50", "p99")
        }
        f = figures[name]
        print(
            f"{name:24} wall p50 {f['wall_p50_ms']:6.3f} ms  p99 {f['wall_p99_ms']:6.3f} ms"
            f"   client CPU p50 {f['cpu_p50_ms']:6.3f} ms  p99 {f['cpu_p99_ms']:6.3f} ms"
            f"   (n={len(s['wall'])})"
        )
    ratios = {
        key: round(figures[OURS][key] / figures[BARE][key], 3)
        for key in ("wall_p50_ms", "wall_p99_ms", "cpu_p50_ms", "cpu_p99_ms")
    }
    rows = [
        headline("create wall p50, ours / bare lightkube", ratios["wall_p50_ms"]),
        headline("create wall p99, ours / bare lightkube", ratios["wall_p99_ms"]),
        headline("create client CPU p50, ours / bare lightkube", ratios["cpu_p50_ms"]),
        headline("create client CPU p99, ours / bare lightkube", ratios["cpu_p99_ms"]),
    ]
    print_headlines(rows)
    write_results(
        NAME,
        {"rounds": rounds, "per_round": per_round, "figures": figures, "headlines": rows},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
