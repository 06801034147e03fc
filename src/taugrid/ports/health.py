"""The fault source port: where GPU-health observations come from (the NVML event loop
and poll, the kernel log, a replayed file for tests, demos and drills; ``tau admin health
inject`` hands its observation to the monitor directly, as a scripted source would).

Contract for implementations:

- ``read(timeout_s)`` returns the observations since the last call, already normalized
  (``domain.health.Observation``: which GPU on which node, when, what). It may block up
  to ``timeout_s`` waiting for the next one (an event wait), and must not block much
  longer: the monitor runs every call under a watchdog (``taugrid.health.watchdog``),
  and a call past its deadline is itself an observation (``nvml_hang``), never a hang of
  the monitor.
- A malformed record from outside (a kernel-log line, a replayed line) is skipped or
  refused with its line number (``SourceError``), never raised as anything else; a
  source whose library or device is absent says so once (``available`` False, with
  ``why``) and reads nothing.
- ``close()`` is idempotent.

The node actuator port (below) is the cluster mode's hands: cordon, evict, uncordon.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from taugrid.domain.health import Observation
from taugrid.errors import TauError


class SourceError(TauError):
    code = "health_source_invalid"
    exit_code = 2
    http_status = 422


class FaultSource(Protocol):
    name: str  # "nvml-event", "nvml-poll", "kmsg", "replay"

    @property
    def available(self) -> bool: ...

    @property
    def why(self) -> str:
        """Why the source reads nothing (its library or device is absent); "" if it reads."""
        ...

    def read(self, timeout_s: float) -> list[Observation]: ...

    def close(self) -> None: ...


# -- a cluster's nodes ----------------------------------------------------------------------
@dataclass(frozen=True)
class PodOnNode:
    namespace: str
    name: str
    uid: str
    gpus: int  # nvidia.com/gpu requested by its containers
    run_id: str = ""  # TauGrid's pods name their run; "" for anyone else's


class NodeActuator(Protocol):
    """What the cluster health controller does to nodes (``server.health_cluster``; the
    Kubernetes adapter is ``executors.kubernetes.node_health``).

    - ``gpu_nodes()``: the nodes that offer GPUs (the circuit breaker's fleet).
    - ``cordoned_by_us(node)``, ``cordoned_by_taugrid()``: whether TauGrid's cordon is on
      one node; every node it is on (one list).
    - ``cordon(node, reason)``: cordon with TauGrid's taint and marker; True only when
      this call cordoned it (False: TauGrid had already, or a person had: theirs stays
      theirs). Idempotent.
    - ``uncordon(node)``: only a node TauGrid cordoned; False (nothing changed) otherwise.
    - ``set_condition(node, healthy, reason, message)``: the node's ``GPUHealthy``
      condition, for anyone reading nodes (kubectl, schedulers, other tools); the
      node's other conditions are kept. False when it already said so.
    - ``pods_on(node)``: the pods bound to it.
    - ``evict(namespace, pod)``: through the Eviction API, waiting out a disruption
      budget up to a deadline; True once the pod is gone. May block for minutes: call it
      off any request's path.
    Each may raise ``TauError`` when the API cannot be reached.
    """

    def gpu_nodes(self) -> list[str]: ...

    def cordoned_by_us(self, node: str) -> bool: ...

    def cordoned_by_taugrid(self) -> set[str]: ...

    def cordon(self, node: str, reason: str) -> bool: ...

    def uncordon(self, node: str) -> bool: ...

    def set_condition(self, node: str, healthy: bool, reason: str, message: str) -> bool: ...

    def pods_on(self, node: str) -> list[PodOnNode]: ...

    def evict(self, namespace: str, pod: str) -> bool: ...
