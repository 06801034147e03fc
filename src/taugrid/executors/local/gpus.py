"""What this machine offers to runs: GPUs (through NVML when present), CPUs and memory.

Behind a small probe interface so tests and CPU-only machines declare GPUs instead
(``TAU_LOCAL_GPUS=4`` or ``tau server start --gpus 4``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    name: str  # e.g. "NVIDIA H100 80GB HBM3"; declared GPUs are named "declared"


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
                out.append(
                    Gpu(i, _text(pynvml.nvmlDeviceGetUUID(h)), _text(pynvml.nvmlDeviceGetName(h)))
                )
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


def gpus_of_type(gpus: list[Gpu], gpu_type: str | None) -> list[Gpu]:
    """GPUs a flavor with this ``gpu_type`` covers: a case-insensitive match on the name
    ("h100" covers "NVIDIA H100 80GB HBM3"); declared GPUs and ``None`` cover all."""
    if gpu_type is None:
        return list(gpus)
    t = gpu_type.lower()
    return [g for g in gpus if g.name == "declared" or t in g.name.lower()]


_VENDOR_WORDS = {"nvidia", "tesla", "geforce", "quadro"}


def short_gpu_type(name: str) -> str:
    """The ``gpu_type`` people write for a GPU model name, as flavors use it:
    "NVIDIA H100 80GB HBM3" -> "h100", "NVIDIA A100-SXM4-80GB" -> "a100",
    "NVIDIA GeForce RTX 4090" -> "rtx-4090"."""
    words = [w for w in name.lower().replace("-", " ").split() if w not in _VENDOR_WORDS]
    if not words:
        return "gpu"
    if words[0] in ("rtx", "gtx") and len(words) > 1:
        return f"{words[0]}-{words[1]}"
    return words[0]
