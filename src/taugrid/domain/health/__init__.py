"""GPU health: classify what the fault sources observed into levels and actions. Pure.

The contract (shared/reference/gpu-health.md, 7.3):

* Input: :class:`Observation`, one normalized reading or event (an Xid, an uncorrectable
  ECC delta, a pending or failed row remap, the driver's recovery action, an NVLink down,
  a thermal slowdown, a missing GPU, a hung NVML call), checked when built: a malformed
  one raises :class:`InvalidObservation` (a ``ValueError``).
* Output: :class:`Decision`\\ s, each with a :class:`Level` -- L0 record only; L1 job
  fault, no device action; L2 quarantine that GPU and evict only its pods; L3 cordon and
  taint the node and evict all its GPU pods; L4 RMA candidate, out until a human decides;
  L5 an Xid the catalog lacks, fail closed (cordon, evict nothing, page a human) -- the
  action in words, the scope (GPU or node), the reason ("Xid 79 (GPU fallen off the
  bus)"), whether it is an RMA candidate and whether it duplicates an event already acted
  on (then act on nothing).
* State: :class:`ClassifierState`, plain data passed in and returned by :func:`classify`
  (or kept by a :class:`Classifier` for an event loop). Every window uses the
  observations' own times; nothing here reads a clock, a file other than the vendored
  catalog, or the network.
* Policy: :class:`HealthRules` (per-Xid overrides of the catalog's levels, windows and
  thresholds), with the reference's defaults.

Acting on decisions -- cordons, taints, evictions, the circuit breaker that stops
cordoning a large share of the fleet at once -- belongs to the actuator, not here.
"""

from taugrid.domain.health.catalog import (
    LEVEL_WORDS,
    Catalog,
    CatalogError,
    Level,
    XidEntry,
    load_catalog,
    parse_catalog,
)
from taugrid.domain.health.classify import (
    ACTIONS,
    Classifier,
    ClassifierState,
    Decision,
    Scope,
    Track,
    classify,
    release,
)
from taugrid.domain.health.observations import (
    InvalidObservation,
    Kind,
    Observation,
    RecoveryAction,
)
from taugrid.domain.health.rules import HealthRules, InvalidRules

__all__ = [
    "ACTIONS",
    "LEVEL_WORDS",
    "Catalog",
    "CatalogError",
    "Classifier",
    "ClassifierState",
    "Decision",
    "HealthRules",
    "InvalidObservation",
    "InvalidRules",
    "Kind",
    "Level",
    "Observation",
    "RecoveryAction",
    "Scope",
    "Track",
    "XidEntry",
    "classify",
    "load_catalog",
    "parse_catalog",
    "release",
]
