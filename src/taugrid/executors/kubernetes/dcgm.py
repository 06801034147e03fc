"""GPU use on a cluster: the DCGM exporter's series, read from the cluster's Prometheus
(``--prometheus-url``): the ``GpuUsage`` port's cluster adapter (``ports/devices.py``).

NVIDIA's dcgm-exporter (a DaemonSet of the GPU operator) exports per GPU
``DCGM_FI_DEV_GPU_UTIL`` (percent), ``DCGM_FI_DEV_FB_USED`` and ``DCGM_FI_DEV_FB_FREE``
(MiB), labelled with the pod, namespace and container using it when its Kubernetes
mapping is on (the GPU operator's default). A scrape config without ``honor_labels``
renames those to ``exported_pod`` and ``exported_namespace``: both are read. A run's
series are those of its attempt's pods (``<job name>-...``) in its namespace.

Prometheus unreachable, or an answer that is not one, gives no readings (said once until
it answers again): a run without readings is never idle.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

from taugrid.domain.gpu_use import GpuReading
from taugrid.ports.devices import RunPlace

log = logging.getLogger("taugrid.kubernetes")
UTIL = "DCGM_FI_DEV_GPU_UTIL"
USED = "DCGM_FI_DEV_FB_USED"
FREE = "DCGM_FI_DEV_FB_FREE"
MIB = 1 << 20

Fetch = Callable[[str, float], bytes]  # (URL, timeout) -> body


def _fetch(url: str, timeout_s: float) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:
        body: bytes = resp.read()
        return body


class DcgmUsage:
    def __init__(self, prometheus_url: str, *, timeout_s: float = 5.0, fetch: Fetch = _fetch):
        self.url = prometheus_url.rstrip("/")
        self.timeout_s = timeout_s
        self.fetch = fetch
        self._failing = False

    def read(self, runs: Mapping[str, RunPlace]) -> dict[str, list[GpuReading]]:
        try:
            util, used, free = (self._query(m) for m in (UTIL, USED, FREE))
        except (OSError, ValueError, KeyError) as exc:
            if not self._failing:
                log.warning("GPU use: the DCGM series cannot be read from %s: %s", self.url, exc)
            self._failing = True
            return {}
        if self._failing:
            log.info("GPU use: the DCGM series are read from %s again", self.url)
        self._failing = False
        out: dict[str, list[GpuReading]] = {}
        by_namespace: dict[str, list[tuple[str, str]]] = {}
        for run_id, place in runs.items():
            by_namespace.setdefault(place.namespace, []).append((f"{place.pod_prefix}-", run_id))
        for key, pct in util.items():
            namespace, pod, _host, gpu = key
            run = next(
                (r for prefix, r in by_namespace.get(namespace, ()) if pod.startswith(prefix)),
                None,
            )
            if run is None:
                continue
            mem_used = used.get(key, 0.0)
            total = mem_used + free.get(key, 0.0)
            out.setdefault(run, []).append(
                GpuReading(int(gpu), pct, int(mem_used * MIB), int(total * MIB))
            )
        return out

    def _query(self, metric: str) -> dict[tuple[str, str, str, str], float]:
        url = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': metric})}"
        answer = json.loads(self.fetch(url, self.timeout_s))
        if answer.get("status") != "success":
            raise ValueError(f"Prometheus answered {answer.get('error') or answer.get('status')}")
        out = {}
        for series in answer["data"]["result"]:
            labels: dict[str, Any] = series["metric"]
            pod = labels.get("pod") or labels.get("exported_pod")
            namespace = labels.get("namespace") or labels.get("exported_namespace")
            gpu = str(labels.get("gpu", ""))
            if not pod or not namespace or not gpu.isdigit():
                continue  # a GPU no pod uses, or a series that is not the exporter's
            key = (str(namespace), str(pod), str(labels.get("Hostname", "")), gpu)
            out[key] = float(series["value"][1])
        return out

    def close(self) -> None:
        pass
