"""The device inventory port: the GPUs runs can be given, which can change at run time
(a GPU appears or vanishes, the health monitor quarantines one).

Contract: ``devices`` is cheap (the engine reads it every scheduling pass) and ``version``
changes whenever the answer of ``devices`` or ``quarantined`` would; ``quarantine`` and
``release`` are idempotent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from taugrid.domain.gpu_use import GpuReading


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    name: str  # e.g. "NVIDIA H100 80GB HBM3"; declared GPUs are named "declared"
    pci: str = ""  # the PCI bus id NVML reports ("00000000:3B:00.0"), which the kernel log names


class DeviceInventory(Protocol):
    @property
    def version(self) -> int: ...

    def devices(self) -> list[Gpu]: ...

    def quarantined(self) -> dict[int, str]:
        """GPU index -> why it is out of service."""
        ...

    def quarantine(self, index: int, why: str) -> None: ...

    def release(self, index: int) -> None: ...


@dataclass(frozen=True)
class RunPlace:
    """Where a running run's GPUs are: their indices on this machine (local mode), or the
    namespace and name prefix of its pods (a cluster: ``<job name>-...``)."""

    gpus: tuple[int, ...] = ()
    namespace: str = ""
    pod_prefix: str = ""


class GpuUsage(Protocol):
    """How busy the running runs' GPUs are (``server/gpu_use.py`` samples it).

    Contract: ``read`` answers within a few seconds with, per run it could read, the
    readings of its GPUs; a run or a GPU it cannot read (a lost GPU, a driver or an
    exporter that does not report) is left out, never read as idle. ``close`` lets go of
    the driver or connection."""

    def read(self, runs: Mapping[str, RunPlace]) -> dict[str, list[GpuReading]]: ...

    def close(self) -> None: ...


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
