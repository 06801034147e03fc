"""The classifier's policy: per-Xid levels over the catalog's, windows and thresholds. Pure.

Defaults are the reference's (shared/reference/gpu-health.md, 7.3): dedup identical
events for 3 min, the same Xid from two sources for 30 s, a DBE (Xid 48) with a remap
event (63/64) within 30 s is a node fault, and an RMA candidate after 5 fatal Xids on one
GPU in 24 h or a second Xid 64 or 140. A site changes any of them by building its own
:class:`HealthRules`; the policy layer turns YAML into one, the domain never reads files.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from taugrid.domain.health.catalog import Catalog, Level
from taugrid.domain.health.observations import Kind, RecoveryAction

# Levels of the readings that are not Xids (7.3). An uncorrectable ECC delta is a GPU
# fault; a pending remap only queues an idle-time reset; a remap failure is sticky, so
# the GPU is an RMA candidate; a GPU gone or NVML hung takes the node out.
KIND_LEVELS: Mapping[Kind, Level] = MappingProxyType(
    {
        Kind.ECC_DBE: Level.L2,
        Kind.REMAP_PENDING: Level.L0,
        Kind.REMAP_FAILURE: Level.L4,
        Kind.NVLINK_DOWN: Level.L2,
        Kind.THERMAL: Level.L0,
        Kind.CLOCK_SLOWDOWN: Level.L0,  # a symptom to record and chart, not a fault
        Kind.GPU_MISSING: Level.L3,
        Kind.NVML_HANG: Level.L3,
    }
)
RECOVERY_LEVELS: Mapping[RecoveryAction, Level] = MappingProxyType(
    {
        RecoveryAction.NONE: Level.L0,
        RecoveryAction.GPU_RESET: Level.L2,
        RecoveryAction.DRAIN_P2P: Level.L2,
        RecoveryAction.DRAIN_AND_RESET: Level.L2,
        RecoveryAction.NODE_REBOOT: Level.L3,
    }
)
DBE_XID = 48
REMAP_XIDS = frozenset({63, 64})  # the remap event and the remap failure that pair with 48


class InvalidRules(ValueError):
    """A rule that cannot be applied: a negative window, a count under 1, a bad Xid."""


@dataclass(frozen=True)
class HealthRules:
    # Xid -> level, over the catalog's (an Xid the catalog lacks gets this level, not L5).
    overrides: Mapping[int, Level] = field(default_factory=dict)
    # Kind -> level for the non-Xid readings, over KIND_LEVELS.
    kind_levels: Mapping[Kind, Level] = field(default_factory=dict)
    # Recovery action -> level, over RECOVERY_LEVELS.
    recovery_levels: Mapping[RecoveryAction, Level] = field(default_factory=dict)
    dedup_s: float = 180.0  # identical (GPU, kind, Xid) within this is one event
    cross_source_s: float = 30.0  # the same (GPU, Xid) from another source within this
    dbe_pair_s: float = 30.0  # Xid 48 with 63/64 within this: a node fault
    rma_window_s: float = 24 * 3600.0
    rma_fatal_count: int = 5  # fatal Xids on one GPU within the window: RMA candidate
    rma_repeat_xids: frozenset[int] = frozenset({64, 140})
    rma_repeat_count: int = 2  # one of rma_repeat_xids this often in the window: RMA
    catalog: Catalog | None = None  # None: the vendored catalog

    def __post_init__(self) -> None:
        for name in ("dedup_s", "cross_source_s", "dbe_pair_s", "rma_window_s"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                raise InvalidRules(f"{name} = {value!r}: a window is a finite number >= 0")
        for name in ("rma_fatal_count", "rma_repeat_count"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidRules(f"{name} = {value!r}: a count is an integer >= 1")
        for xid in (*self.overrides, *self.rma_repeat_xids):
            if isinstance(xid, bool) or not isinstance(xid, int) or xid < 0:
                raise InvalidRules(f"Xid {xid!r} in the rules is not a non-negative integer")
        if Kind.XID in self.kind_levels or Kind.RECOVERY_ACTION in self.kind_levels:
            raise InvalidRules(
                "kind_levels sets non-Xid readings; use overrides for Xids "
                "and recovery_levels for the driver's recovery action"
            )
        for mapping in (self.overrides, self.kind_levels, self.recovery_levels):
            for level in mapping.values():
                if not isinstance(level, Level):
                    raise InvalidRules(f"level {level!r} is not a Level (L0..L5)")

    def kind_level(self, kind: Kind) -> Level:
        return self.kind_levels.get(kind, KIND_LEVELS[kind])

    def recovery_level(self, action: RecoveryAction) -> Level:
        return self.recovery_levels.get(action, RECOVERY_LEVELS[action])
