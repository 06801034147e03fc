"""What this machine offers to runs: GPUs (through NVML when present), CPUs and memory.

Behind a small probe interface so tests and CPU-only machines declare GPUs instead
(``TAU_LOCAL_GPUS=4`` or ``tau server start --gpus 4``).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Protocol

from taugrid.ports.devices import Gpu, gpus_of_type, short_gpu_type

__all__ = [
    "DeclaredGpus",
    "Gpu",
    "GpuProbe",
    "LocalDeviceInventory",
    "NvmlGpus",
    "gpus_of_type",
    "probe_gpus",
    "short_gpu_type",
]


class GpuProbe(Protocol):
    def gpus(self) -> list[Gpu]: ...


@dataclass(frozen=True)
class DeclaredGpus:
    count: int
    name: str = "declared"

    def gpus(self) -> list[Gpu]:
        return [Gpu(i, f"declared-{i}", self.name) for i in range(self.count)]


class NvmlGpus:
    """Real GPUs via nvidia-ml-py; none when the library or the driver is missing."""

    def gpus(self) -> list[Gpu]:
        try:
            import pynvml
        except ImportError:
            return []
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError:
            return []
        try:
            out = []
            for i in range(pynvml.nvmlDeviceGetCount()):
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                uuid, name = _text(pynvml.nvmlDeviceGetUUID(h)), _text(pynvml.nvmlDeviceGetName(h))
                out.append(Gpu(i, uuid, name, _text(pynvml.nvmlDeviceGetPciInfo(h).busId)))
            return out
        finally:
            pynvml.nvmlShutdown()


def _text(v: str | bytes) -> str:
    return v.decode() if isinstance(v, bytes) else v


def probe_gpus(declared: int | None) -> list[Gpu]:
    """Declared GPUs win (a CPU-only machine can test a 4-GPU policy); else NVML."""
    if declared is not None:
        return DeclaredGpus(declared).gpus()
    return NvmlGpus().gpus()


def machine_cpus_millis() -> int:
    return (
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    ) * 1000


def machine_memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


class LocalDeviceInventory:
    """The device inventory port over this machine's GPUs, probed once at start (NVML or
    declared), with quarantine kept in memory until GPU health records it (issue 13)."""

    def __init__(self, gpus: list[Gpu]) -> None:
        self._gpus = list(gpus)
        self._quarantined: dict[int, str] = {}
        self._version = 0
        self._lock = threading.Lock()

    @property
    def version(self) -> int:
        return self._version

    def devices(self) -> list[Gpu]:
        return list(self._gpus)

    def quarantined(self) -> dict[int, str]:
        with self._lock:
            return dict(self._quarantined)

    def quarantine(self, index: int, why: str) -> None:
        with self._lock:
            if self._quarantined.get(index) != why:
                self._quarantined[index] = why
                self._version += 1

    def release(self, index: int) -> None:
        with self._lock:
            if self._quarantined.pop(index, None) is not None:
                self._version += 1
