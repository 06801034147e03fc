"""What the GPU-health sources saw, as plain data the classifier can trust. Pure.

An :class:`Observation` is one reading or event from a fault source (the NVML event loop,
the kernel-log parser, a poll, a replayed file), already normalized: which GPU on which
node, when (``at``, seconds on the caller's clock: the classifier reads no clock), and
what. It is checked when it is built, so a malformed one (a negative Xid, no GPU for a
GPU's reading, a NaN time) raises :class:`InvalidObservation` at the source's boundary
and the classifier never meets one: it never fails on an observation that exists.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum


class Kind(StrEnum):
    XID = "xid"  # an Xid event (xid set)
    ECC_DBE = "ecc_dbe"  # the uncorrectable volatile ECC count grew (value: the delta)
    REMAP_PENDING = "remap_pending"  # rows remapped, a reset is due when the GPU is idle
    REMAP_FAILURE = "remap_failure"  # a row could not be remapped (sticky)
    RECOVERY_ACTION = "recovery_action"  # NVML field 230 (value: a RecoveryAction)
    NVLINK_DOWN = "nvlink_down"  # a link down that was up at the healthy baseline
    THERMAL = "thermal"  # the temperature is over the slowdown threshold (value: degrees)
    CLOCK_SLOWDOWN = "clock_slowdown"  # the hardware slows the clocks (value: NVML's mask)
    GPU_MISSING = "gpu_missing"  # fewer GPUs than expected, or a GPU vanished
    NVML_HANG = "nvml_hang"  # an NVML call ran past its watchdog


# Readings about the node as a whole: the GPU may be unknown (a count shortfall names no
# GPU; a hung NVML call may have been a device-less one).
NODE_KINDS = frozenset({Kind.GPU_MISSING, Kind.NVML_HANG})


class RecoveryAction(StrEnum):
    """The driver's verdict (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION), by NVML's names."""

    NONE = "NONE"
    GPU_RESET = "GPU_RESET"
    NODE_REBOOT = "NODE_REBOOT"
    DRAIN_P2P = "DRAIN_P2P"
    DRAIN_AND_RESET = "DRAIN_AND_RESET"


_RECOVERY_BY_NUMBER = dict(enumerate(RecoveryAction))  # NVML's values 0..4, in order


class InvalidObservation(ValueError):
    """An observation that no source should produce: a bug at the source, not a fault."""


def recovery_action(value: object) -> RecoveryAction:
    """A recovery action from its NVML name ("GPU_RESET") or number (1)."""
    if isinstance(value, str):
        try:
            return RecoveryAction(value.strip().upper())
        except ValueError:
            pass
    elif isinstance(value, int | float) and not isinstance(value, bool) and value == int(value):
        found = _RECOVERY_BY_NUMBER.get(int(value))
        if found is not None:
            return found
    names = ", ".join(a.value for a in RecoveryAction)
    raise InvalidObservation(f"recovery action {value!r} is none of {names} (or 0..4)")


@dataclass(frozen=True, slots=True)
class Observation:
    kind: Kind
    gpu_uuid: str  # "" only for a node reading (NODE_KINDS)
    node: str
    at: float  # seconds on the caller's clock
    xid: int | None = None  # set for Kind.XID only
    value: float | str | None = None  # the delta, the recovery action, the temperature
    detail: str = ""  # the source's own words (a kmsg line), carried into the reason
    source: str = ""  # "nvml", "kmsg", "poll": the same Xid from two sources is one event

    def __post_init__(self) -> None:
        try:
            kind = Kind(self.kind)
        except ValueError:
            known = ", ".join(k.value for k in Kind)
            raise InvalidObservation(f"kind {self.kind!r} is none of {known}") from None
        object.__setattr__(self, "kind", kind)
        if not isinstance(self.node, str) or not self.node:
            raise InvalidObservation(f"{kind}: the node is empty")
        if not isinstance(self.gpu_uuid, str):
            raise InvalidObservation(f"{kind}: gpu_uuid {self.gpu_uuid!r} is not a string")
        if not self.gpu_uuid and kind not in NODE_KINDS:
            raise InvalidObservation(f"{kind} on node {self.node}: no GPU named")
        at = self.at
        if isinstance(at, bool) or not isinstance(at, int | float) or not math.isfinite(at):
            raise InvalidObservation(f"{kind}: time {at!r} is not a finite number")
        self._check_xid(kind)
        if kind is Kind.RECOVERY_ACTION:
            object.__setattr__(self, "value", recovery_action(self.value).value)
        elif self.value is not None and kind is not Kind.XID:
            v = self.value
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                raise InvalidObservation(f"{kind}: value {v!r} is not a finite number")

    def _check_xid(self, kind: Kind) -> None:
        xid = self.xid
        if kind is not Kind.XID:
            if xid is not None:
                raise InvalidObservation(f"{kind}: an Xid ({xid!r}) on a non-Xid reading")
            return
        if isinstance(xid, bool) or not isinstance(xid, int):
            raise InvalidObservation(f"xid on {self.gpu_uuid}: {xid!r} is not an integer")
        if xid < 0:
            raise InvalidObservation(f"xid on {self.gpu_uuid}: {xid} is negative")
