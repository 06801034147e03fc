"""The GPU health agent of one cluster node (``tau health agent``; a DaemonSet in the chart):
it reads the node's fault sources and reports what they saw to the server, which decides
and acts (``server/health_cluster.py``: cordon, taint, evict, restart elsewhere).

- Sources, each read under its watchdog (``taugrid.health.watchdog``): NVML's event wait
  and its 15 s poll (where the driver is: a node without one says so once), the kernel
  log (``--kmsg``, ``/dev/kmsg`` by default where NVML found GPUs), and ``--replay FILE``
  (a drill's or a test's observations, refused whole with its line number).
- Reports: ``POST /api/v1/health/reports`` with the agent account's token, whenever
  there is something to say and every ``--interval`` seconds regardless (the heartbeat
  that keeps the node from showing ``unknown``). A report the server did not take is
  kept and sent again (at most ``PENDING_MAX`` observations, the oldest dropped with a
  warning), so a server restart loses nothing the node saw.
- Which pods use which GPU: the kubelet's pod-resources API (``taugrid.health.
  podresources``), sent with each report that has observations, so the server narrows an
  L2 fault to the pods on that GPU; where it cannot be read the server takes the node's
  GPU pods instead (failing safe, its event says so).

It uses the standard library for HTTP and imports nothing of the server.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from taugrid.domain.health import Observation
from taugrid.health.exporter import AgentMetrics
from taugrid.health.kmsg import KmsgSource
from taugrid.health.nvml import NvmlEventSource, NvmlPollSource, load_nvml, open_gpus, shutdown
from taugrid.health.podresources import SOCKET, PodResources
from taugrid.health.replay import FIELDS, ReplaySource
from taugrid.health.watchdog import Watched
from taugrid.ports.health import FaultSource

log = logging.getLogger("taugrid.health")
REPORT_PATH = "/api/v1/health/reports"
READ_TIMEOUT_S = 0.5
DEADLINE_S = 45.0
PENDING_MAX = 10_000


class ReportRefused(Exception):
    """The server answered, and said no (a 4xx): sending it again changes nothing."""


@dataclass
class Sender:
    """POSTs a node's report; ``post`` is injectable (tests, other transports)."""

    server: str
    token: str
    timeout_s: float = 10.0
    post: Callable[[str, bytes, dict[str, str], float], dict[str, Any]] | None = None

    def send(self, body: dict[str, Any]) -> dict[str, Any]:
        data = json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
        url = self.server.rstrip("/") + REPORT_PATH
        if self.post is not None:
            return self.post(url, data, headers, self.timeout_s)
        req = urllib.request.Request(url, data=data, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                answer: dict[str, Any] = json.loads(resp.read())
                return answer
        except urllib.error.HTTPError as exc:
            with exc:
                said = exc.read().decode(errors="replace")[:500]
            if 400 <= exc.code < 500:
                raise ReportRefused(f"the server refused the report ({exc.code}): {said}") from None
            raise OSError(f"the server failed ({exc.code}): {said}") from None


@dataclass
class Agent:
    node: str
    sources: Sequence[FaultSource]
    sender: Sender
    gpus: list[dict[str, Any]] = field(default_factory=list)
    interval_s: float = 30.0
    clock: Callable[[], float] = time.monotonic
    pods: PodResources | None = None  # which pods use which GPU (the kubelet's API)
    pending: list[dict[str, Any]] = field(default_factory=list)
    last_sent: float | None = None
    standing: dict[str, Any] | None = None
    metrics: AgentMetrics | None = None  # --metrics-port: per-GPU health for Prometheus

    def read(self) -> int:
        """One round over the sources; how many observations it added."""
        added = 0
        for source in self.sources:
            try:
                seen = source.read(READ_TIMEOUT_S)
            except Exception:  # a source's failure is logged, never the agent's end
                log.exception("GPU health: reading %s failed", source.name)
                continue
            for obs in seen:
                self.pending.append(_record(obs))
                added += 1
                if self.metrics is not None:
                    self.metrics.observed(obs)
        if len(self.pending) > PENDING_MAX:
            dropped = len(self.pending) - PENDING_MAX
            log.warning("GPU health: %d unsent observations dropped (oldest first)", dropped)
            del self.pending[:dropped]
        return added

    def due(self) -> bool:
        return (
            bool(self.pending)
            or self.last_sent is None
            or (self.clock() - self.last_sent >= self.interval_s)
        )

    def report(self) -> bool:
        """Send what is pending (or a heartbeat); True when the server took it."""
        batch = list(self.pending)
        body: dict[str, Any] = {"node": self.node, "observations": batch, "gpus": self.gpus}
        if batch and self.pods is not None:  # asked only when there is a fault to narrow
            body["gpu_pods"] = self.pods.gpu_pods()
        try:
            self.standing = self.sender.send(body)
        except (OSError, ValueError) as exc:  # unreachable, or an answer that is not JSON
            log.warning("GPU health: report not sent (kept for the next one): %s", exc)
            if self.metrics is not None:
                self.metrics.reported(False, len(self.pending))
            return False
        del self.pending[: len(batch)]
        self.last_sent = self.clock()
        if self.metrics is not None:
            self.metrics.reported(True, len(self.pending))
        return True

    def close(self) -> None:
        for source in self.sources:
            source.close()
        if self.pods is not None:
            self.pods.close()


def _record(obs: Observation) -> dict[str, Any]:
    doc = {name: getattr(obs, name) for name in FIELDS}
    doc["kind"] = obs.kind.value
    doc.pop("node")  # the report's node
    return {k: v for k, v in doc.items() if v not in (None, "")}


def node_gpus(nvml: Any = None) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The node's GPUs as NVML lists them, and their PCI bus ids to UUIDs (for the kernel
    log's lines); nothing where NVML is absent."""
    module, _why = load_nvml(nvml)  # the sources say why, once
    if module is None:
        return [], {}
    try:
        gpus, pci = [], {}
        for g in open_gpus(module):
            gpus.append({"index": g.index, "uuid": g.uuid})
            if g.handle is not None:
                bus = module.nvmlDeviceGetPciInfo(g.handle).busId
                pci[bus.decode() if isinstance(bus, bytes) else str(bus)] = g.uuid
        return gpus, pci
    except Exception as exc:
        log.warning("GPU health: NVML lists no GPUs: %s", exc)
        return [], {}
    finally:
        shutdown(module)


def build(
    node: str,
    sender: Sender,
    *,
    replay: Path | None = None,
    kmsg: str | None = None,
    nvml: bool = True,
    interval_s: float = 30.0,
    pod_resources: str | None = SOCKET,
    metrics_port: int | None = None,
) -> Agent:
    gpus, pci = node_gpus() if nvml else ([], {})
    sources: list[FaultSource] = []
    if nvml:
        sources += [NvmlEventSource(node), NvmlPollSource(node)]
    kmsg = kmsg or ("/dev/kmsg" if gpus else None)
    if kmsg:
        sources.append(KmsgSource(kmsg, node=node, pci_to_gpu=pci))
    if replay is not None:
        sources.append(ReplaySource(replay, node=node))
    watched = [Watched(s, node=node, deadline_s=DEADLINE_S) for s in sources]
    pods = PodResources(pod_resources) if pod_resources else None
    metrics = None
    if metrics_port:
        metrics = AgentMetrics(gpus)
        metrics.serve(metrics_port)
    return Agent(
        node, watched, sender, gpus=gpus, interval_s=interval_s, pods=pods, metrics=metrics
    )


def run(agent: Agent, *, once: bool = False) -> int:
    """Read and report until stopped (or one round with ``once``); the exit status."""
    backoff = 1.0
    try:
        while True:
            started = time.monotonic()
            agent.read()
            if agent.due():
                sent = agent.report()
                if once:
                    print(json.dumps(agent.standing if sent else {"sent": False}))
                    return 0 if sent else 1
                if not sent:
                    time.sleep(backoff)
                    backoff = min(backoff * 2, 30.0)
                else:
                    backoff = 1.0
            # Sources that answer at once (a replay, NVML absent) must not spin the loop.
            time.sleep(max(0.0, READ_TIMEOUT_S - (time.monotonic() - started)))
    finally:
        agent.close()


def default_node() -> str:
    return os.environ.get("NODE_NAME") or socket.gethostname()


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="tau health agent", description=__doc__.split("\n")[0])
    parser.add_argument("--server", required=True, help="The TauGrid server's URL.")
    parser.add_argument("--token-file", type=Path, required=True)
    parser.add_argument("--node", default=default_node(), help="This node's name ($NODE_NAME).")
    parser.add_argument("--replay", type=Path, help="Observations to report (a drill).")
    parser.add_argument("--kmsg", help="The kernel log to read (/dev/kmsg where GPUs are).")
    parser.add_argument("--no-nvml", action="store_true", help="Do not read NVML.")
    parser.add_argument(
        "--pod-resources", default=SOCKET, help="The kubelet's pod-resources socket ('' : none)."
    )
    parser.add_argument("--interval", type=float, default=30.0, help="Heartbeat, seconds.")
    parser.add_argument("--once", action="store_true", help="Read once, report, print, exit.")
    parser.add_argument(
        "--metrics-port", type=int, default=0, help="Serve Prometheus /metrics here (0: off)."
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        token = args.token_file.read_text().strip()
        sender = Sender(args.server, token)
        agent = build(
            args.node,
            sender,
            replay=args.replay,
            kmsg=args.kmsg,
            nvml=not args.no_nvml,
            interval_s=args.interval,
            pod_resources=args.pod_resources or None,
            metrics_port=args.metrics_port or None,
        )
        return run(agent, once=args.once)
    except Exception as exc:  # unreadable token, a replay refused with its line: one line
        print(f"tau health agent: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
