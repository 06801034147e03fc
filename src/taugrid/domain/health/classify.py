"""From one GPU-health observation to the decisions it calls for. Pure.

The classifier detects; it does not act (an actuator cordons, taints, evicts). Its state
is plain data passed in and out, so each step is a function of (state, observation,
rules) and every window is measured on the observations' own times (``at``): replays and
tests are deterministic, and no clock is read here.

What one observation yields (in order): its own decision, then escalations, each a
:class:`Decision` with the level, the action in words and the reason.

* **Dedup.** An event identical to one already acted on -- the same GPU (or node), kind,
  Xid and level (so a reading that turns worse is never a duplicate) -- within
  ``dedup_s`` (3 min) of it, or the same Xid from another source within
  ``cross_source_s``, yields exactly one decision marked ``duplicate=True`` and
  leaves the state as it was: it is not counted toward an RMA and it escalates nothing.
  Duplicates are returned (not dropped) so a caller can count them; an actuator acts on
  decisions whose ``duplicate`` is False. The window runs from the last event acted on,
  so a fault that persists is acted on again every ``dedup_s``.
* **Escalation.** Xid 48 (DBE) and Xid 63 or 64 on one GPU within ``dbe_pair_s`` (30 s)
  of each other, in either order (the kernel log and NVML may deliver them out of
  order), add an L3 node fault. A fatal Xid (NVIDIA's bucket says F, the rules keep it at
  L2 or above) seen ``rma_fatal_count`` times on one GPU within ``rma_window_s`` (5 in
  24 h), or one of ``rma_repeat_xids`` (64, 140) seen ``rma_repeat_count`` times there,
  adds one L4 RMA-candidate decision naming every cause.
* **Standing.** Each GPU and node has the highest level it reached; the classifier never
  lowers it (an L4 GPU stays L4 whatever comes next). Only :func:`release`, the human's or
  the remediation's verdict, does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from types import MappingProxyType

from taugrid.domain.health.catalog import Level, load_catalog
from taugrid.domain.health.observations import Kind, Observation, RecoveryAction
from taugrid.domain.health.rules import DBE_XID, REMAP_XIDS, HealthRules

ACTIONS: Mapping[Level, str] = MappingProxyType(
    {
        Level.L0: "record only (metric and event)",
        Level.L1: "no device action: the job fails and resumes from its checkpoint",
        Level.L2: "quarantine the GPU, evict only its pods, reset it when idle",
        Level.L3: "cordon and taint the node, evict all its GPU pods, reboot it",
        Level.L4: "keep it out of service (RMA candidate): never uncordon, a human decides",
        Level.L5: "cordon the node (fail closed), evict nothing, page a human",
    }
)
IDLE_RESET = "record; reset the GPU when it is next idle, no eviction"
FOLLOW_DRIVER = "record; follow the driver's recovery action (NVML field 230)"


class Scope(StrEnum):
    GPU = "gpu"
    NODE = "node"


@dataclass(frozen=True, slots=True)
class Decision:
    level: Level
    action: str
    scope: Scope
    node: str
    gpu_uuid: str  # the GPU the observation named ("" for a node reading)
    reason: str  # "Xid 79 (GPU fallen off the bus)"
    at: float
    standing: Level  # the target's highest level after this decision
    rma_candidate: bool = False
    duplicate: bool = False  # the same event was already acted on: act on nothing

    @property
    def cordon(self) -> bool:
        return self.level >= Level.L3

    @property
    def evict(self) -> str:
        """Whose pods to evict: "gpu" (its own), "node" (all GPU pods) or "none"."""
        if self.level in (Level.L2, Level.L4) and self.gpu_uuid:
            return "gpu"
        return "node" if self.level is Level.L3 else "none"


@dataclass(frozen=True, slots=True)
class Track:
    """What the classifier remembers of one GPU (or of a node: ``gpu_uuid`` "")."""

    standing: Level = Level.L0
    acted: Mapping[str, tuple[float, str]] = field(default_factory=dict)  # key -> at, source
    fatal_at: tuple[float, ...] = ()  # counted fatal Xids within the RMA window
    repeats: Mapping[int, tuple[float, ...]] = field(default_factory=dict)
    dbe_at: float | None = None  # the last Xid 48 acted on
    remap_at: float | None = None  # the last Xid 63 or 64 acted on


Key = tuple[str, str]  # (node, gpu_uuid); gpu_uuid "" for the node itself
EMPTY = Track()
NO_TRACKS: Mapping[str, Track] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class ClassifierState:
    # node -> gpu_uuid ("" for the node itself) -> track. Grouped by node so that a step
    # copies the node index and one node's few tracks, not every track of the fleet.
    nodes: Mapping[str, Mapping[str, Track]] = field(default_factory=dict)

    def track(self, key: Key) -> Track | None:
        return self.nodes.get(key[0], NO_TRACKS).get(key[1])

    def standing(self, node: str, gpu_uuid: str = "") -> Level:
        return (self.track((node, gpu_uuid)) or EMPTY).standing


def classify(
    state: ClassifierState, obs: Observation, rules: HealthRules | None = None
) -> tuple[ClassifierState, list[Decision]]:
    """The decisions ``obs`` calls for and the state after it (``state`` is not changed)."""
    updates, decisions = step(state.track, obs, rules or DEFAULT_RULES)
    if not updates:
        return state, decisions
    return _updated(state, updates), decisions


def release(state: ClassifierState, node: str, gpu_uuid: str = "") -> ClassifierState:
    """The state with a GPU's (or node's) standing back at L0: a human (L4, L5) or a
    passed diagnostic (L2, L3) said it may serve again. Its fault history stays (the RMA
    count goes on), but what was acted on is forgotten: the same fault after the return
    is a new fault, never a duplicate of the one before."""
    track = state.track((node, gpu_uuid))
    if track is None:
        return state
    return _updated(state, {(node, gpu_uuid): replace(track, standing=Level.L0, acted={})})


def _updated(state: ClassifierState, updates: Mapping[Key, Track]) -> ClassifierState:
    nodes = dict(state.nodes)
    for (node, gpu), track in updates.items():
        nodes[node] = MappingProxyType({**nodes.get(node, NO_TRACKS), gpu: track})
    return ClassifierState(MappingProxyType(nodes))


class Classifier:
    """The same steps over a state it keeps and changes in place (no copy per event): for
    an agent's event loop. Its decisions are exactly those of :func:`classify`."""

    def __init__(self, rules: HealthRules | None = None) -> None:
        self.rules = rules or DEFAULT_RULES
        self._nodes: dict[str, dict[str, Track]] = {}

    def _track(self, key: Key) -> Track | None:
        return self._nodes.get(key[0], _NO_GPUS).get(key[1])

    def observe(self, obs: Observation) -> list[Decision]:
        updates, decisions = step(self._track, obs, self.rules)
        for (node, gpu), track in updates.items():
            self._nodes.setdefault(node, {})[gpu] = track
        return decisions

    @property
    def state(self) -> ClassifierState:
        nodes = {n: MappingProxyType(dict(g)) for n, g in self._nodes.items()}
        return ClassifierState(MappingProxyType(nodes))


_NO_GPUS: dict[str, Track] = {}
DEFAULT_RULES = HealthRules()
Lookup = Callable[[Key], Track | None]


def step(
    get: Lookup, obs: Observation, rules: HealthRules
) -> tuple[dict[Key, Track], list[Decision]]:
    """The tracks ``obs`` changes and its decisions; ``get`` reads the current tracks."""
    gkey: Key = (obs.node, obs.gpu_uuid)
    track = get(gkey) or EMPTY
    level, action, reason = _base(obs, rules)
    scope = Scope.NODE if level >= Level.L3 or not obs.gpu_uuid else Scope.GPU
    # The level is part of what makes two events identical: an ECC delta of 0 and then
    # of 3, or the recovery action NONE and then GPU_RESET, are a change, not a repeat.
    key = f"{obs.kind}:{obs.xid}:{level:d}"
    prev = track.acted.get(key)
    if prev is not None and _duplicate(prev, obs, rules):
        stand = _standing(get, obs, track, scope)
        dup = Decision(
            level,
            action,
            scope,
            obs.node,
            obs.gpu_uuid,
            reason,
            obs.at,
            stand,
            rma_candidate=level is Level.L4,
            duplicate=True,
        )
        return {}, [dup]
    acted = {**track.acted, key: (obs.at, obs.source)}
    t = track  # built directly: dataclasses.replace costs as much as the rest of a step
    track = Track(max(t.standing, level), acted, t.fatal_at, t.repeats, t.dbe_at, t.remap_at)
    pending = [(level, action, scope, reason)]
    if obs.kind is Kind.XID and obs.xid is not None:
        track, escalations = _escalate(track, obs.xid, obs.at, level, rules)
        pending += escalations
    if len(pending) == 1 and (scope is Scope.GPU or not obs.gpu_uuid):  # the common case
        d = Decision(
            level,
            action,
            scope,
            obs.node,
            obs.gpu_uuid,
            reason,
            obs.at,
            track.standing,
            rma_candidate=level is Level.L4,
        )
        return {gkey: track}, [d]
    node_track: Track | None = None
    decisions: list[Decision] = []
    for i, (lvl, act, scp, why) in enumerate(pending):
        duplicate = False
        if i:  # an escalation is deduplicated as events are, on a key of its own
            esc = f"escalation:{lvl.name}"
            last = track.acted.get(esc)
            duplicate = last is not None and abs(obs.at - last[0]) <= rules.dedup_s
            if not duplicate:
                acted = {**track.acted, esc: (obs.at, obs.source)}
                track = replace(track, acted=acted, standing=max(track.standing, lvl))
        stand = track.standing
        if scp is Scope.NODE and obs.gpu_uuid:
            node_track = node_track or get((obs.node, "")) or EMPTY
            if not duplicate:
                node_track = replace(node_track, standing=max(node_track.standing, lvl))
            stand = max(stand, node_track.standing)
        decisions.append(
            Decision(
                lvl,
                act,
                scp,
                obs.node,
                obs.gpu_uuid,
                why,
                obs.at,
                stand,
                rma_candidate=lvl is Level.L4,
                duplicate=duplicate,
            )
        )
    updates: dict[Key, Track] = {gkey: track}
    if node_track is not None:
        updates[(obs.node, "")] = node_track
    return updates, decisions


def _duplicate(prev: tuple[float, str], obs: Observation, rules: HealthRules) -> bool:
    gap = abs(obs.at - prev[0])
    if gap <= rules.dedup_s:
        return True
    return obs.kind is Kind.XID and prev[1] != obs.source and gap <= rules.cross_source_s


def _standing(get: Lookup, obs: Observation, track: Track, scope: Scope) -> Level:
    if scope is Scope.NODE and obs.gpu_uuid:
        return max(track.standing, (get((obs.node, "")) or EMPTY).standing)
    return track.standing


def _base(obs: Observation, rules: HealthRules) -> tuple[Level, str, str]:
    """The observation's own level, action and reason, before any escalation."""
    detail = f": {obs.detail}" if obs.detail else ""
    if obs.kind is Kind.XID:
        assert obs.xid is not None  # Observation checks it
        level, action, reason = _xid(obs.xid, rules)
        return level, action, reason + detail
    if obs.kind is Kind.RECOVERY_ACTION:
        ra = RecoveryAction(str(obs.value))
        level = rules.recovery_level(ra)
        return level, ACTIONS[level], f"driver recovery action {ra.value}{detail}"
    level = rules.kind_level(obs.kind)
    action = ACTIONS[level]
    if obs.kind is Kind.ECC_DBE:
        if obs.value is not None and float(obs.value) <= 0:
            return Level.L0, ACTIONS[Level.L0], f"no new uncorrectable ECC errors{detail}"
        grew = f" (+{obs.value:g})" if isinstance(obs.value, int | float) else ""
        return level, action, f"uncorrectable ECC errors{grew}{detail}"
    if obs.kind is Kind.REMAP_PENDING and level is Level.L0:
        action = IDLE_RESET
    value = f" ({obs.value:g})" if isinstance(obs.value, int | float) else ""
    return level, action, f"{_KIND_WORDS[obs.kind]}{value}{detail}"


_KIND_WORDS: Mapping[Kind, str] = MappingProxyType(
    {
        Kind.REMAP_PENDING: "row remap pending",
        Kind.REMAP_FAILURE: "row remap failure",
        Kind.NVLINK_DOWN: "NVLink down",
        Kind.THERMAL: "temperature over the slowdown threshold",
        Kind.CLOCK_SLOWDOWN: "clocks slowed by the hardware",
        Kind.GPU_MISSING: "GPU missing",
        Kind.NVML_HANG: "NVML call past its watchdog",
    }
)


def _xid(xid: int, rules: HealthRules) -> tuple[Level, str, str]:
    entry = (rules.catalog or load_catalog()).get(xid)
    override = rules.overrides.get(xid)
    if entry is None:
        if override is None:
            return Level.L5, ACTIONS[Level.L5], f"Xid {xid} (not in the catalog: fail closed)"
        return override, ACTIONS[override], f"Xid {xid} (not in the catalog; level from rules)"
    reason = f"Xid {xid} ({entry.name})"
    if override is not None:
        return override, ACTIONS[override], f"{reason}; level {override.name} from the rules"
    if entry.level is None:
        return Level.L0, FOLLOW_DRIVER, reason
    if xid in REMAP_XIDS and entry.level is Level.L0:
        return Level.L0, IDLE_RESET, reason
    return entry.level, ACTIONS[entry.level], reason


def _escalate(
    track: Track, xid: int, at: float, level: Level, rules: HealthRules
) -> tuple[Track, list[tuple[Level, str, Scope, str]]]:
    """Pair Xid 48 with 63/64 and count toward an RMA, on an Xid acted on at ``at``."""
    out: list[tuple[Level, str, Scope, str]] = []
    if xid == DBE_XID:
        track = replace(track, dbe_at=at)
        other = track.remap_at
    elif xid in REMAP_XIDS:
        track = replace(track, remap_at=at)
        other = track.dbe_at
    else:
        other = None
    if other is not None and abs(at - other) <= rules.dbe_pair_s:
        why = f"Xid {DBE_XID} (DBE) with Xid 63/64 within {rules.dbe_pair_s:g} s"
        out.append((Level.L3, ACTIONS[Level.L3], Scope.NODE, why))
    entry = (rules.catalog or load_catalog()).get(xid)
    causes: list[str] = []
    window = rules.rma_window_s
    if entry is not None and entry.fatal and level >= Level.L2:
        fatal = _within((*track.fatal_at, at), at, window)
        track = replace(track, fatal_at=fatal)
        if len(fatal) >= rules.rma_fatal_count:
            causes.append(f"{len(fatal)} fatal Xids on the GPU within {window / 3600:g} h")
    if xid in rules.rma_repeat_xids:
        seen = _within((*track.repeats.get(xid, ()), at), at, window)
        track = replace(track, repeats={**track.repeats, xid: seen})
        if len(seen) >= rules.rma_repeat_count:
            causes.append(f"Xid {xid} seen {len(seen)} times within {window / 3600:g} h")
    if causes:
        out.append((Level.L4, ACTIONS[Level.L4], Scope.NODE, "; ".join(causes)))
    return track, out


def _within(times: tuple[float, ...], at: float, window: float) -> tuple[float, ...]:
    """The times within ``window`` of the latest one (events may arrive out of order)."""
    latest = max(at, *times)
    return tuple(t for t in times if latest - t <= window)
