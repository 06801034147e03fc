"""Xids from the kernel log: the driver writes ``NVRM: Xid (PCI:0000:3b:00): 79, pid=…,
GPU has fallen off the bus.`` for each one, which catches Xids logged before the monitor
started (``/dev/kmsg`` replays its ring buffer when opened) or while NVML is wedged.

:func:`parse_xid_line` is pure and total: any line, however malformed, gives an Xid or
None, never an error. :class:`KmsgSource` reads what was appended since its last read,
without blocking, from ``/dev/kmsg`` (one record per ``read``) or from a file (a saved
journal, a drill), and names the GPU by its PCI address (``pci_to_gpu``, from NVML), or
``PCI:<address>`` when NVML does not know it.
"""

from __future__ import annotations

import errno
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from taugrid.domain.health import Kind, Observation

_XID = re.compile(
    r"NVRM: Xid \(PCI:([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.\d)?\): "
    r"(\d{1,5})\b,?\s*(.*)"
)
MAX_LINE = 8192  # a longer line is not the driver's


@dataclass(frozen=True)
class XidLine:
    pci: str  # normalized: "0000:3b:00"
    xid: int
    detail: str


def normalize_pci(address: str) -> str:
    """ "00000000:3B:00.0" (NVML) or "0000:3b:00" (the driver) -> "0000:3b:00"."""
    parts = address.lower().split(".")[0].split(":")
    if len(parts) != 3:
        return address.lower()
    domain, bus, device = parts
    return f"{int(domain, 16):04x}:{bus}:{device}"


def parse_xid_line(line: str) -> XidLine | None:
    if len(line) > MAX_LINE:
        return None
    m = _XID.search(line)
    if m is None:
        return None
    return XidLine(normalize_pci(m.group(1)), int(m.group(2)), " ".join(m.group(3).split()))


class KmsgSource:
    name = "kmsg"

    def __init__(
        self,
        path: str = "/dev/kmsg",
        *,
        node: str,
        pci_to_gpu: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = path
        self.node = node
        self._gpus = {normalize_pci(k): v for k, v in (pci_to_gpu or {}).items()}
        self._clock = clock
        self._fd: int | None = None
        self._buffer = b""
        self.why = ""
        try:
            self._fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            self.why = f"cannot read the kernel log at {path}: {exc.strerror}"

    @property
    def available(self) -> bool:
        return self._fd is not None

    def read(self, timeout_s: float) -> list[Observation]:
        if self._fd is None:
            return []
        lines: list[bytes] = []
        while True:
            try:
                chunk = os.read(self._fd, 65536)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # /dev/kmsg: the ring overwrote what we missed
                    continue
                raise
            if not chunk:
                break
            self._buffer += chunk
            *done, self._buffer = self._buffer.split(b"\n")
            lines.extend(done)
        if len(self._buffer) > MAX_LINE:
            self._buffer = b""
        now = self._clock()
        out = []
        for raw in lines:
            found = parse_xid_line(raw.decode("utf-8", "replace"))
            if found is None:
                continue
            gpu = self._gpus.get(found.pci, f"PCI:{found.pci}")
            out.append(
                Observation(
                    Kind.XID, gpu, self.node, now, xid=found.xid, detail=found.detail, source="kmsg"
                )
            )
        return out

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
