"""What a health decision does on one machine (local mode), decided purely before
anything is done: the GPUs to take out of service and the runs to stop, or why nothing
is done (a duplicate, a level that asks for nothing, shadow mode, the circuit breaker).

On one machine the node is the machine: cordoning it would stop every run for one bad
GPU, so a decision that names a GPU of this machine takes that GPU out, whatever its
scope; only a reading that names none (a GPU count shortfall, a hung NVML call, an Xid
on a PCI address NVML does not know) takes them all out, failing closed. L2 to L4 stop
the runs holding the GPUs taken out (they restart as hardware failures elsewhere); L5,
an Xid nobody knows, takes the GPU out but stops nothing: a human decides.

The circuit breaker (:func:`breaker_allows`) counts the take-outs in a window (one per
decision): beyond a share of the fleet, a burst is more likely the monitor's or the driver's fault
than the hardware's, and decisions are recorded, not acted on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from taugrid.domain.health.catalog import Level
from taugrid.domain.health.classify import Decision

APPLIED = "applied"
RECORDED = "recorded"  # a level that asks for no device action
DUPLICATE = "duplicate"
SHADOW = "shadow"  # shadow mode: what would have been done, not done
BREAKER = "breaker"  # the circuit breaker is open: recorded, not acted on


@dataclass(frozen=True)
class Breaker:
    share: float = 0.2  # at most this share of the fleet taken out ...
    window_s: float = 600.0  # ... within this long (NVSentinel 50 %/5 min; EKS stops at 20 %)


@dataclass(frozen=True)
class LocalGpu:
    index: int
    uuid: str


@dataclass(frozen=True)
class Effects:
    outcome: str
    quarantine: tuple[LocalGpu, ...] = ()  # to take out of service, in index order
    stop_runs: tuple[str, ...] = ()  # to stop as hardware failures, sorted
    words: str = ""  # what is (or would have been) done


def breaker_allows(
    taken_out_at: Sequence[float], now: float, new: int, fleet: int, breaker: Breaker
) -> bool:
    """Whether ``new`` more may be taken out, given when the others were: at most
    ``share`` of ``fleet`` (never fewer than one) within ``window_s``."""
    if new <= 0:
        return True
    recent = sum(1 for t in taken_out_at if now - breaker.window_s < t <= now)
    allowed = max(1, math.floor(breaker.share * fleet))
    return recent + new <= allowed


def local_effects(
    decision: Decision,
    gpus: Sequence[LocalGpu],
    holders: Mapping[int, Sequence[str]],
    out_of_service: frozenset[str],
    *,
    taken_out_at: Sequence[float] = (),
    shadow: bool = False,
    breaker: Breaker = Breaker(),
) -> Effects:
    if decision.duplicate:
        return Effects(DUPLICATE, words="already acted on")
    if decision.level <= Level.L1:
        return Effects(RECORDED, words="recorded; no device action")
    named = [g for g in gpus if g.uuid == decision.gpu_uuid]
    targets = named if named else list(gpus)
    new = tuple(sorted((g for g in targets if g.uuid not in out_of_service), key=_index))
    stop: tuple[str, ...] = ()
    if decision.level is not Level.L5:
        indices = {g.index for g in targets}
        stop = tuple(sorted({r for i in indices for r in holders.get(i, ())}))
    words = _words(targets, named, stop, decision.level)
    if shadow:
        return Effects(SHADOW, words=f"shadow mode: would {words}")
    # One decision is one take-out, however many GPUs it names: a machine failing whole
    # counts once (as one node would on a cluster).
    if not breaker_allows(taken_out_at, decision.at, 1 if new else 0, len(gpus), breaker):
        return Effects(
            BREAKER,
            words=(
                f"circuit breaker open: more than {breaker.share:.0%} of {len(gpus)} GPU(s) "
                f"out within {breaker.window_s:g} s; would {words}"
            ),
        )
    return Effects(APPLIED, quarantine=new, stop_runs=stop, words=words)


def _index(g: LocalGpu) -> int:
    return g.index


def _words(
    targets: Sequence[LocalGpu], named: Sequence[LocalGpu], stop: Sequence[str], level: Level
) -> str:
    what = (
        f"take GPU {targets[0].index} out of service"
        if named
        else f"take all {len(targets)} GPU(s) out of service (no GPU of this machine named)"
    )
    if level is Level.L5:
        return f"{what}; stop nothing and wait for a human (unknown fault)"
    if stop:
        return f"{what}; stop {', '.join(stop)} to resume elsewhere"
    return f"{what}; no run held it"


# -- a cluster node ---------------------------------------------------------------------
@dataclass(frozen=True)
class NodeEffects:
    """What a decision does to a cluster node: cordon it (with TauGrid's taint), and
    whose pods to evict through the Eviction API ("node": every GPU pod on it, "gpu":
    only those on the faulty GPU, "none")."""

    outcome: str
    cordon: bool = False
    evict: str = "none"
    words: str = ""


def node_effects(
    decision: Decision,
    *,
    gpu_nodes: int,
    cordoned_at: Sequence[float] = (),
    already_cordoned: bool = False,
    shadow: bool = False,
    breaker: Breaker = Breaker(),
) -> NodeEffects:
    """L2 evicts the GPU's pods and cordons nothing; L3 cordons and evicts every GPU pod;
    L4 keeps it out; L5 cordons and evicts nothing (a human decides). A new cordon counts
    against the breaker: at most ``share`` of the GPU nodes within the window."""
    if decision.duplicate:
        return NodeEffects(DUPLICATE, words="already acted on")
    if decision.level <= Level.L1:
        return NodeEffects(RECORDED, words="recorded; no node action")
    cordon, evict = decision.cordon, decision.evict
    what = [f"cordon and taint node {decision.node}"] if cordon else []
    if evict == "node":
        what.append("evict its GPU pods")
    elif evict == "gpu":
        what.append(f"evict the pods on GPU {decision.gpu_uuid}")
    else:
        what.append("evict nothing and wait for a human")
    words = "; ".join(what)
    if shadow:
        return NodeEffects(SHADOW, words=f"shadow mode: would {words}")
    new = 1 if cordon and not already_cordoned else 0
    if not breaker_allows(cordoned_at, decision.at, new, gpu_nodes, breaker):
        return NodeEffects(
            BREAKER,
            words=(
                f"circuit breaker open: more than {breaker.share:.0%} of {gpu_nodes} GPU "
                f"node(s) cordoned within {breaker.window_s:g} s; would {words}"
            ),
        )
    return NodeEffects(APPLIED, cordon=cordon, evict=evict, words=words)
