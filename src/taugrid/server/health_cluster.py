"""The GPU health controller of a cluster server: from what the nodes' agents report to
nodes cordoned, pods evicted and the affected runs resumed elsewhere.

Each node's agent (``python -m taugrid.healthagent``) reads its GPUs and posts what it saw
(``POST /api/v1/health/reports``, also its heartbeat). For each observation: the
classifier decides (``domain.health``, pure, one state for the fleet), the effects on the
node are planned (``domain.health.effects.node_effects``: the level, shadow mode, the
circuit breaker over the GPU nodes), the event is committed (``store.health``: every
decision is an audit row, acted on or not), and only then is anything done, once:

- L2 (and L4 on a GPU): the GPU is recorded out of service; the runs with a pod on that
  GPU are stopped as hardware faults with the fault's time. Which pods use which GPU is
  the agent's to say (``gpu_pods``, from the kubelet's pod-resources API); a report
  without that map stops every GPU run on the node, failing safe, and its event says so.
- L3: the node is cordoned with the ``taugrid.io/gpu-unhealthy`` taint, every run with a
  pod there is stopped as a hardware fault, and anyone else's GPU pods are evicted
  through the Eviction API (disruption budgets respected) on a worker thread.
- L5 (an Xid nobody knows): cordoned, nothing evicted, a human decides.

A run stopped for hardware ends its attempt through the executor, which evicts the
attempt's pods before deleting its objects (``executors.kubernetes.executor``); the run
then requeues through Kueue and restarts from the newest verified checkpoint written
before the fault, as on one machine. Only a person returns a node (``return_node``), and
TauGrid uncordons only the nodes it cordoned.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from taugrid.domain.health import ClassifierState, HealthRules, Level, Observation, classify
from taugrid.domain.health.classify import Decision, release
from taugrid.domain.health.effects import APPLIED, Breaker, NodeEffects, node_effects
from taugrid.domain.stops import StopReason
from taugrid.errors import NotFound, UsageError
from taugrid.ports.health import NodeActuator, PodOnNode
from taugrid.server.health import Stopper, action_of, returned_event
from taugrid.store.health import HealthStore

log = logging.getLogger("taugrid.health")
CORDON_ACTION = "cordon the node"
AGENT_STALE_S = 120.0  # an agent silent this long: its node's GPUs are unknown


@dataclass(frozen=True)
class NodeReport:
    node: str
    observations: Sequence[Observation]
    gpus: Sequence[Mapping[str, Any]] = ()  # [{"index", "uuid", "name"}] as the agent sees
    gpu_pods: Mapping[str, Sequence[str]] | None = None  # GPU uuid -> "namespace/pod" on it


@dataclass(frozen=True)
class NodeStanding:
    """What the server holds of a node, answered to its agent (its node condition)."""

    node: str
    level: int
    healthy: bool
    reason: str
    events: tuple[int, ...] = ()  # the events this report recorded


@dataclass
class _Seen:
    at: float
    gpus: list[dict[str, Any]] = field(default_factory=list)


class ClusterHealthController:
    def __init__(
        self,
        store: HealthStore,
        nodes: NodeActuator,
        stopper: Stopper,
        *,
        rules: HealthRules | None = None,
        shadow: bool = False,
        breaker: Breaker | None = None,
        clock: Callable[[], float] = time.time,
        evict_async: bool = True,
    ) -> None:
        self.store = store
        self.nodes = nodes
        self.stopper = stopper
        self.rules = rules or HealthRules()
        self.shadow = shadow
        self.breaker = breaker or Breaker()
        self.clock = clock
        self._state = ClassifierState()
        self._lock = threading.Lock()  # one observation at a time: decide, then apply
        self._cordoned_at: list[float] = []
        self._seen: dict[str, _Seen] = {}
        self._said: dict[str, tuple[bool, int]] = {}  # the node conditions written
        self._why: dict[str, set[str]] = {}  # the faults behind a node's standing
        # For the metrics (server/metrics.py): decisions by (level, outcome, kind).
        self.decisions: Counter[tuple[int, str, str]] = Counter()
        self.runs_stopped = 0
        self.pods_evicted = 0
        self._evictions: queue.Queue[tuple[str, str] | None] = queue.Queue()
        self._evict_async = evict_async
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------
    def restore(self) -> None:
        """The breaker's window survives a restart: the cordons of the last window."""
        since = self.clock() - self.breaker.window_s
        rows = self.store.events(since=since, limit=1000)
        self._cordoned_at = sorted(
            r["at"] for r in rows if r["outcome"] == APPLIED and r["action"] == CORDON_ACTION
        )

    def start(self) -> None:
        if self._evict_async:
            self._thread = threading.Thread(target=self._evict_loop, name="tau-evict", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._evictions.put(None)
            self._thread.join(timeout=5)

    def _evict_loop(self) -> None:
        while (item := self._evictions.get()) is not None:
            self._evict_now(*item)

    def _evict_now(self, namespace: str, pod: str) -> None:
        try:
            if self.nodes.evict(namespace, pod):
                self.pods_evicted += 1
        except Exception:  # one pod's failure is logged, never the controller's end
            log.exception("GPU health: evicting %s/%s failed", namespace, pod)

    # -- one report -----------------------------------------------------------------------
    def report(self, rep: NodeReport) -> NodeStanding:
        for obs in rep.observations:
            if obs.node != rep.node:
                raise UsageError(
                    f"the report of node {rep.node} has an observation of node {obs.node}: "
                    "an agent speaks for its own node only"
                )
        self._seen[rep.node] = _Seen(self.clock(), [dict(g) for g in rep.gpus])
        ids = []
        with self._lock:
            for obs in rep.observations:
                self._state, decisions = classify(self._state, obs, self.rules)
                ids += [self._apply(obs, d, rep) for d in decisions]
            standing = self._standing(rep.node, tuple(ids))
            self._condition(standing)
            return standing

    def _condition(self, standing: NodeStanding) -> None:
        """The node's GPUHealthy condition follows the standing (written on a change)."""
        said = (standing.healthy, standing.level)
        if self._said.get(standing.node) == said:
            return
        reason = "AllGPUsHealthy" if standing.healthy else f"GPUFaultL{standing.level}"
        try:
            self.nodes.set_condition(standing.node, standing.healthy, reason, standing.reason)
            self._said[standing.node] = said
        except Exception:  # the decision stands; the condition is written on a later report
            log.exception("GPU health: setting node %s's condition failed", standing.node)

    def _level(self, node: str) -> int:
        """The node's standing: the worst of its own and its GPUs' tracks."""
        tracks = self._state.nodes.get(node, {})
        return max((int(t.standing) for t in tracks.values()), default=0)

    def _standing(self, node: str, ids: tuple[int, ...]) -> NodeStanding:
        level = self._level(node)
        out = [r for r in self.store.quarantined() if r["node"] == node]
        if level >= Level.L2 or out:
            reasons = sorted({r["reason"] for r in out} | set(self._why.get(node, ())))
            words = "; ".join(reasons) or f"level L{level}"
            worst = max([level, *(r["level"] for r in out)])
            return NodeStanding(node, worst, False, words, ids)
        return NodeStanding(node, level, True, "all GPUs healthy", ids)

    def _apply(self, obs: Observation, d: Decision, rep: NodeReport) -> int:
        node = d.node
        effects: NodeEffects
        if d.duplicate or d.level <= Level.L1:
            effects = node_effects(d, gpu_nodes=1)  # duplicate or recorded: no API call
        else:
            fleet = self.nodes.gpu_nodes()
            effects = node_effects(
                d,
                gpu_nodes=max(1, len(fleet)),
                cordoned_at=self._cordoned_at,
                already_cordoned=d.cordon and self.nodes.cordoned_by_us(node),
                shadow=self.shadow,
                breaker=self.breaker,
            )
        pods: list[PodOnNode] = []
        fallback = False
        if effects.outcome == APPLIED and effects.evict != "none":
            pods, fallback = self._targets(node, effects.evict, d.gpu_uuid, rep.gpu_pods)
        words = effects.words + (
            "; the agent named no pods per GPU: every GPU pod on the node" if fallback else ""
        )
        gpu_index = _index(rep.gpus, d.gpu_uuid)
        event = {
            "at": d.at,
            "node": node,
            "gpu": d.gpu_uuid or None,
            "gpu_index": gpu_index,
            "source": obs.source or "agent",
            "kind": obs.kind.value,
            "xid": obs.xid,
            "level": int(d.level),
            "action": CORDON_ACTION if effects.cordon else action_of(d),
            "outcome": effects.outcome,
            "reason": f"{d.reason}: {words}",
        }
        self.decisions[(int(d.level), effects.outcome, obs.kind.value)] += 1
        if not d.duplicate and d.level >= Level.L2:
            self._why.setdefault(node, set()).add(d.reason)
        if effects.outcome != APPLIED:
            if effects.outcome != "duplicate" and d.level >= 2:
                log.warning("GPU health: %s on %s (%s)", event["reason"], node, effects.outcome)
            return self.store.record(event)
        # Durable first: the event (and the GPU out of service) before any API call.
        if d.gpu_uuid and d.level in (Level.L2, Level.L4):
            event_id = self.store.take_out(
                [(d.gpu_uuid, gpu_index)],
                node=node,
                level=int(d.level),
                reason=d.reason,
                fault_at=d.at,
                event=event,
            )
        else:
            event_id = self.store.record(event)
        if effects.cordon and self.nodes.cordon(node, d.reason):
            self._cordoned_at.append(d.at)
        stopped = []
        for run_id in sorted({p.run_id for p in pods if p.run_id}):
            message = f"{d.reason} on node {node}; it resumes on healthy nodes"
            if self.stopper.request_stop(run_id, StopReason.HARDWARE, message, fault_at=d.at):
                stopped.append(run_id)
        for p in pods:
            if not p.run_id:  # anyone else's GPU pod: evicted, its owner reschedules it
                if self._evict_async:
                    self._evictions.put((p.namespace, p.name))
                else:
                    self._evict_now(p.namespace, p.name)
        if stopped:
            self.store.set_runs(event_id, stopped)
            self.runs_stopped += len(stopped)
        log.warning("GPU health: %s", event["reason"])
        return event_id

    def _targets(
        self,
        node: str,
        evict: str,
        gpu_uuid: str,
        gpu_pods: Mapping[str, Sequence[str]] | None,
    ) -> tuple[list[PodOnNode], bool]:
        """The pods to take off the node, and whether the GPU's pods were unknown."""
        on_gpus = [p for p in self.nodes.pods_on(node) if p.gpus > 0]
        if evict == "node":
            return on_gpus, False
        if gpu_pods is None:
            return on_gpus, True
        named = set(gpu_pods.get(gpu_uuid, ()))
        return [p for p in on_gpus if f"{p.namespace}/{p.name}" in named], False

    # -- what people do ---------------------------------------------------------------------
    def return_node(self, node: str, by: str) -> bool:
        """Back into service after a person's decision: TauGrid's cordon undone (never
        anyone else's), its GPUs back, the classifier's standing for them released.
        False when nothing of it was out."""
        seen = self._seen.get(node)
        if node not in self.nodes.gpu_nodes() and seen is None:
            raise NotFound(f"no GPU node {node} in the cluster")
        event = returned_event(
            self.clock(), node, None, None, f"node {node} returned to service by {by}"
        )
        with self._lock:
            gpus = [r["gpu"] for r in self.store.quarantined() if r["node"] == node]
            uncordoned = self.nodes.uncordon(node)
            released = [g for g in gpus if self.store.release(g, by, event)]
            standing = self._state.nodes.get(node, {})
            if not (uncordoned or released or any(t.standing for t in standing.values())):
                return False
            if not released:
                self.store.record(event)
            for gpu in list(standing):
                self._state = release(self._state, node, gpu)
            self._why.pop(node, None)
            self._condition(NodeStanding(node, 0, True, f"returned to service by {by}"))
        return True

    def agents_seen(self) -> dict[str, float]:
        """When each node's agent last reported (unix seconds), from memory: `tau admin
        cluster check` tells the nodes whose agent is silent."""
        return {node: seen.at for node, seen in list(self._seen.items())}

    def agents_summary(self) -> dict[str, int]:
        """From memory, for the metrics: the nodes whose agent reported within
        ``AGENT_STALE_S`` ("reporting"), those it has not since ("silent"), and the nodes
        whose standing is a GPU or node fault ("unhealthy")."""
        now = self.clock()
        silent = sum(1 for s in self._seen.values() if now - s.at > AGENT_STALE_S)
        unhealthy = sum(1 for node in self._seen if self._level(node) >= Level.L2)
        return {"reporting": len(self._seen) - silent, "silent": silent, "unhealthy": unhealthy}

    def nodes_view(self) -> list[dict[str, Any]]:
        """Every GPU node: its agent's last word, standing, GPUs out of service."""
        now = self.clock()
        out_rows = self.store.quarantined()
        names = sorted(set(self.nodes.gpu_nodes()) | set(self._seen))
        ours = self.nodes.cordoned_by_taugrid()  # one list, not a read per node
        view = []
        for name in names:
            seen = self._seen.get(name)
            level = self._level(name)
            out = [r for r in out_rows if r["node"] == name]
            if seen is None or now - seen.at > AGENT_STALE_S:
                health = "unknown"  # no agent heard from: never a reassuring "healthy"
            elif level >= Level.L2 or out:
                health = "unhealthy"
            else:
                health = "healthy"
            view.append(
                {
                    "node": name,
                    "health": health,
                    "level": level,
                    "cordoned_by_taugrid": name in ours,
                    "agent_seen_at": seen.at if seen else None,
                    "gpus": seen.gpus if seen else [],
                    "out_of_service": [
                        {"gpu": r["gpu"], "level": r["level"], "reason": r["reason"]} for r in out
                    ],
                }
            )
        return view


def _index(gpus: Sequence[Mapping[str, Any]], uuid: str) -> int | None:
    for g in gpus:
        if g.get("uuid") == uuid and isinstance(g.get("index"), int):
            return int(g["index"])
    return None
