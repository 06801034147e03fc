"""The executor port: start attempts, observe them, stop them with a reason.

Contract, for every implementation:
- Keys are ``AttemptKey`` (run id, attempt number); an attempt is launched at most once
  per key, and ``launch`` of a key already launched does nothing (idempotent: the engine
  launches again after a crash between recording an admission and launching).
- ``observe_many`` returns one ``Observation`` per key asked for, never raises for one
  bad attempt (an attempt it cannot make sense of is ``exited`` as ``lost``), and must
  return quickly: it runs on the engine's thread every pass (cache what is costly).
- ``stop`` delivers the reason with the stop; the attempt's exit later reports it back as
  ``AttemptExit.stop_reason``. It is idempotent and must not raise when the attempt is
  already gone (then it returns False).
- ``launch`` may raise ``TauError`` (or any exception) when the attempt cannot be started:
  the run fails visibly with the message. It must not block for long (no waiting for the
  workload to start; unpacking large inputs belongs in the background).
- ``submits_before_admission``: an executor whose admitter decides on objects it must see
  first (Kueue admits a suspended Job) is asked to ``launch`` a queued run's next attempt
  before it is admitted; its placement is then unknown (None). Such an executor is told,
  each admission cycle, every attempt still wanted (``retain``: the next attempt of each
  queued run, the current one of each active run) and removes the others' objects (a
  run cancelled while queued, an attempt that has ended). Others ignore ``retain``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from taugrid.domain.lifecycle import Observation, Phase
from taugrid.domain.stops import StopReason
from taugrid.errors import UsageError
from taugrid.spec.modes import Capabilities

__all__ = [
    "AdmittedHere",
    "AttemptKey",
    "Capabilities",
    "Executor",
    "LaunchRequest",
    "Observation",
    "Phase",
    "Placement",
]


@dataclass(frozen=True, order=True)
class AttemptKey:
    run_id: str
    attempt: int


@dataclass(frozen=True)
class Placement:
    """Where the admitter put the attempt: a host ("local") or nodes, a flavor, GPUs."""

    flavor: str
    gpus: tuple[int, ...] = ()
    host: str = "local"
    nodes: tuple[str, ...] = ()

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Placement:
        """The placement as an attempt row records it (``as_record``)."""
        return cls(
            flavor=record.get("flavor") or "",
            gpus=tuple(record.get("gpus") or ()),
            host=record.get("host") or "local",
            nodes=tuple(record.get("nodes") or ()),
        )

    def as_record(self) -> dict[str, Any]:
        out: dict[str, Any] = {"host": self.host, "flavor": self.flavor, "gpus": list(self.gpus)}
        if self.nodes:
            out["nodes"] = list(self.nodes)
        return out


@dataclass(frozen=True)
class LaunchRequest:
    """Everything one attempt needs, in primitives (the httpx transport's rule: no server
    objects cross the seam)."""

    run_id: str
    attempt: int
    snapshot_digest: str  # the content-addressed code archive (ArtifactStore.snapshot)
    command: list[str] | str  # argv, or a shell command line
    setup: str | None
    env: dict[str, str]  # the complete environment of the workload
    stop_grace_s: float
    timeout_s: float | None
    outputs: list[str] = field(default_factory=list)
    # env name -> how the workload gets the value (SecretStore.workload_refs): a file
    # path for the local executor, a Secret key for Kubernetes. Never the value.
    secret_refs: dict[str, str] = field(default_factory=dict)
    disk_limit_bytes: int | None = None  # the run's files may take this much (resources.disk)
    image: str | None = None
    nodes: int = 1
    resources: dict[str, Any] = field(default_factory=dict)  # the spec's resources block
    launcher: str = "command"  # command | torchrun | ray
    placement: Placement | None = None
    workspace: str = "default"
    # The run's resolved spec as recorded (plain JSON data): what a cluster executor
    # renders its objects from (queue, priority, flavors, image, resources).
    spec: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> AttemptKey:
        return AttemptKey(self.run_id, self.attempt)


class Executor(Protocol):
    @property
    def capabilities(self) -> Capabilities:
        """What this executor can run (nodes, launchers, images): spec/modes.py checks a
        submission against it, and the CLI learns it from the server."""
        ...

    @property
    def submits_before_admission(self) -> bool:
        """Whether a queued run's next attempt is launched before its admission (see the
        module docstring)."""
        ...

    def retain(self, wanted: set[AttemptKey]) -> None:
        """The attempts still wanted; only a ``submits_before_admission`` executor acts."""
        ...

    def check(self, spec: dict[str, Any]) -> None:
        """Refuse, at submit, a (validated, resolved) spec that no attempt of it could run
        here, with a ``UsageError`` saying why (a cluster: no flavor fits, a name too long
        for a RayJob); nothing is created."""
        ...

    def preview(self, req: LaunchRequest) -> list[dict[str, Any]]:
        """What ``launch`` would create, as plain objects, creating nothing (a dry run);
        an executor with nothing of the kind to show raises ``UsageError`` saying so."""
        ...

    def launch(self, req: LaunchRequest) -> None:
        """Start the attempt (idempotent per key); raise when it cannot be started."""
        ...

    def is_launched(self, key: AttemptKey) -> bool:
        """Whether ``launch`` took effect for the key (survives a server restart)."""
        ...

    def observe_many(self, keys: list[AttemptKey]) -> dict[AttemptKey, Observation]:
        """One observation per key, quickly, never raising for one attempt."""
        ...

    def stop(self, key: AttemptKey, reason: StopReason) -> bool:
        """Stop the attempt for ``reason`` (reported back with its exit); False when it
        has already ended. Idempotent, never raises for an attempt that is gone."""
        ...

    def location(self, key: AttemptKey) -> str:
        """Where the attempt lives, for people and the record (a directory, an object)."""
        ...

    def attempt_of(self, report: str) -> AttemptKey | None:
        """The attempt a status push names (``report`` as the workload's side sent it);
        None for anything that is not one of this executor's attempts."""
        ...


class AdmittedHere:
    """The cluster-only parts of the contract, for an executor whose attempts TauGrid
    itself admits (the local one, the fake): nothing is launched before admission,
    nothing more is refused at submit than the mode's table says, and there are no
    objects for a dry run to show."""

    submits_before_admission = False

    def retain(self, wanted: set[AttemptKey]) -> None:
        return None

    def check(self, spec: dict[str, Any]) -> None:
        return None

    def preview(self, req: LaunchRequest) -> list[dict[str, Any]]:
        raise UsageError(
            "a dry run shows the Kubernetes objects a cluster server would create; this "
            "server runs workloads as local processes (tau render FILE shows a cluster's "
            "objects without a server)"
        )
