"""GPU utilization and memory through NVML: the ``GpuUsage`` port's adapter for a machine
with NVIDIA GPUs (``ports/devices.py``; each run's GPUs by their indices). Beside the
health sources because it shares their NVML loading; it reads, it never decides.

NVML's utilization is the share of the last sample period (1/6 s to 1 s, by GPU) in which
a kernel ran: a GPU that waits on its input pipeline shows as mostly idle, which is what
the idle policy looks for.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from taugrid.domain.gpu_use import GpuReading
from taugrid.health.nvml import describe, load_nvml, shutdown
from taugrid.ports.devices import RunPlace

log = logging.getLogger("taugrid.health")


class NvmlUsage:
    def __init__(self, nvml: Any = None) -> None:
        self._nvml, why = load_nvml(nvml)
        self._lock = threading.Lock()
        self._said: set[int] = set()  # GPUs whose failed reading was logged (once each)
        if self._nvml is None:
            log.info("GPU use is not read: %s", why)

    def read(self, runs: Mapping[str, RunPlace]) -> dict[str, list[GpuReading]]:
        by_gpu = {
            r.index: r for r in self.read_gpus(sorted({i for p in runs.values() for i in p.gpus}))
        }
        out = {run: [by_gpu[i] for i in place.gpus if i in by_gpu] for run, place in runs.items()}
        return {run: readings for run, readings in out.items() if readings}

    def read_gpus(self, indices: Sequence[int]) -> list[GpuReading]:
        """Each of these GPUs' reading, leaving out one NVML cannot read."""
        nvml = self._nvml
        if nvml is None:
            return []
        out = []
        with self._lock:
            for index in indices:
                try:
                    handle = nvml.nvmlDeviceGetHandleByIndex(index)
                    util = nvml.nvmlDeviceGetUtilizationRates(handle)
                    mem = nvml.nvmlDeviceGetMemoryInfo(handle)
                except nvml.NVMLError as exc:
                    if index not in self._said:
                        self._said.add(index)
                        log.warning("GPU use of GPU %d is not read: %s", index, describe(exc))
                    continue
                self._said.discard(index)
                out.append(GpuReading(index, float(util.gpu), int(mem.used), int(mem.total)))
        return out

    def close(self) -> None:
        with self._lock:
            if self._nvml is not None:
                shutdown(self._nvml)
                self._nvml = None
