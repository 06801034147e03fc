"""A cluster's GPU use (executors/kubernetes/dcgm.py): a real Prometheus (Debian's;
mandatory in CI) scrapes an endpoint serving the DCGM exporter's exposition, pod-mapped as
the GPU operator deploys it, and the adapter reads each running run's GPUs from it by its
attempt's pods; the tracker on top flags an idle run. A Prometheus that does not answer
gives no readings, never idleness."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

import promserver
from taugrid.domain.gpu_use import IdleAction, IdleRule
from taugrid.executors.kubernetes.dcgm import DcgmUsage
from taugrid.ports.devices import RunPlace
from taugrid.server.gpu_use import GpuUseTracker, cluster_places

# What dcgm-exporter 4.x serves (the three fields read), two nodes, three pods: (gpu, node,
# namespace, pod) -> utilization %, memory used MiB, memory free MiB (None: not exported).
A_POD = ("tau-team-a", "train-1a2b3-a0-0-x7k2p")
SERIES = {
    ("0", "node-a", *A_POD): (96, 40960, 40960),
    ("1", "node-a", *A_POD): (91, 40000, 41920),
    ("0", "node-b", "tau-team-a", "idle-9z8y7-a1-pq4rs"): (0, 1024, 80896),
    ("1", "node-b", "tau-team-b", "train-1a2b3-a0-0-zzzzz"): (50, None, None),
    ("2", "node-b", None, None): (0, None, None),  # a GPU no pod uses
}
FIELDS = (
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)."),
)


def exposition() -> str:
    lines = []
    for i, (name, help_text) in enumerate(FIELDS):
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
        for (gpu, node, namespace, pod), values in SERIES.items():
            if values[i] is None:
                continue
            labels = f'gpu="{gpu}",UUID="GPU-{node}-{gpu}",Hostname="{node}"'
            if pod is not None:
                labels += f',container="main",namespace="{namespace}",pod="{pod}"'
            lines.append(f"{name}{{{labels}}} {values[i]}")
    return "\n".join(lines) + "\n"


MIB = 1 << 20


class _Exporter(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = exposition().encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[str]:
    exporter = ThreadingHTTPServer(("127.0.0.1", 0), _Exporter)
    threading.Thread(target=exporter.serve_forever, daemon=True).start()
    config = (
        "global: {scrape_interval: 1s}\n"
        "scrape_configs:\n"
        "  - job_name: dcgm-exporter\n"
        "    honor_labels: true\n"  # as the GPU operator's ServiceMonitor: pod, namespace kept
        f"    static_configs: [{{targets: ['127.0.0.1:{exporter.server_port}']}}]\n"
    )
    try:
        with promserver.prometheus(config, tmp_path) as url:
            deadline = time.monotonic() + 60
            while True:  # until the first scrape is in
                try:
                    got = httpx.get(f"{url}/api/v1/query", params={"query": "DCGM_FI_DEV_FB_FREE"})
                    if got.json()["data"]["result"]:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, (tmp_path / "prometheus.log").read_text()
                time.sleep(0.3)
            yield url
    finally:
        exporter.shutdown()
        exporter.server_close()


RUNS = {
    "train-1a2b3": RunPlace(namespace="tau-team-a", pod_prefix="train-1a2b3-a0"),
    "idle-9z8y7": RunPlace(namespace="tau-team-a", pod_prefix="idle-9z8y7-a1"),
    "gone-00000": RunPlace(namespace="tau-team-a", pod_prefix="gone-00000-a0"),
}


def test_each_runs_gpus_come_from_its_own_pods(prometheus: str) -> None:
    got = DcgmUsage(prometheus).read(RUNS)
    assert set(got) == {"train-1a2b3", "idle-9z8y7"}  # no series: no reading
    train = sorted(got["train-1a2b3"], key=lambda g: g.index)
    assert [(g.index, g.utilization_pct) for g in train] == [(0, 96.0), (1, 91.0)]
    assert train[0].memory_used_bytes == 40960 * MIB
    assert train[0].memory_total_bytes == 81920 * MIB
    # The same pod name in another workspace's namespace is another run's.
    assert all(g.utilization_pct != 50.0 for g in train)
    (idle,) = got["idle-9z8y7"]
    assert (idle.utilization_pct, idle.memory_used_bytes) == (0.0, 1024 * MIB)


def test_the_tracker_flags_the_idle_cluster_run(prometheus: str) -> None:
    class Clock:
        now = 1_000_000.0

        def __call__(self) -> float:
            return self.now

    clock, notes = Clock(), []

    class Notes:
        def note(self, run_id: str, reason: Any, message: str) -> None:
            notes.append((run_id, str(reason), message))

    class Stops:
        def request_stop(self, run_id: str, reason: Any, message: str) -> bool:
            raise AssertionError("flag only")

    rows = [
        {"id": "train-1a2b3", "workspace": "team-a", "attempt_count": 1, "gpus": 2},
        {"id": "idle-9z8y7", "workspace": "team-a", "attempt_count": 2, "gpus": 1},
        {"id": "cpu-only-1", "workspace": "team-a", "attempt_count": 1, "gpus": 0},
    ]
    places = cluster_places(lambda: rows, lambda ws: f"tau-{ws}")
    assert places() == {k: v for k, v in RUNS.items() if k != "gone-00000"}
    tracker = GpuUseTracker(
        DcgmUsage(prometheus),
        places,
        lambda: IdleRule(5.0, 60.0, IdleAction.FLAG),
        Notes(),
        Stops(),
        clock=clock,
    )
    for _ in range(5):
        clock.now += 15
        tracker.sample()
    assert [n[:2] for n in notes] == [("idle-9z8y7", "GpuIdle")]
    assert tracker.of("train-1a2b3")["utilization_pct"] == 96.0  # type: ignore[index]
    assert tracker.latest_by_gpu() == {}  # per-GPU series on a cluster are DCGM's own


def test_a_prometheus_that_does_not_answer_gives_no_readings() -> None:
    usage = DcgmUsage(f"http://127.0.0.1:{promserver.free_port()}", timeout_s=1.0)
    assert usage.read(RUNS) == {}
    assert usage.read(RUNS) == {}  # said once, read again each round
