"""The server's view of quota policy: which policy is in force, what the machine has, and
the translation between runs and the scheduler's plain workloads.

Decisions themselves are pure functions in :mod:`taugrid.domain.scheduling`; this module
only builds their input and checks submissions against the policy.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from taugrid.domain.quota import Admitted, Snapshot, Workload
from taugrid.domain.scheduling import never_fits
from taugrid.errors import Unschedulable, UsageError
from taugrid.osuser import current_user
from taugrid.policy import (
    DomainPolicy,
    LoadedPolicy,
    default_policy,
    dump_policy,
    load_policy_text,
    to_domain,
)
from taugrid.ports.devices import DeviceInventory, Gpu, gpus_of_type, short_gpu_type
from taugrid.ports.policy_target import ApplyReport, Drift, PolicyApplyFailed, PolicyTarget
from taugrid.spec import TauSpec
from taugrid.store.policies import PolicyStore

Row = dict[str, Any]
DEFAULT_QUEUE = "default"  # a run's queue when neither its spec nor the policy names one
POLICY_FIX = "add it under workspaces: in policy.yaml and run tau admin policy apply policy.yaml"
BUILTIN_HEADER = (
    "# built-in default policy (no policy applied): one queue over this machine; every\n"
    "# workspace the server knows gets local queue default. Apply a policy.yaml to change it.\n"
)


@dataclass(frozen=True)
class Machine:
    gpus: tuple[Gpu, ...]
    cpus_millis: int
    memory_bytes: int


@dataclass(frozen=True)
class PolicyInForce:
    source: str
    text: str | None  # None for the built-in default
    hash: str | None
    applied_at: float | None
    applied_by: str | None
    domain: DomainPolicy
    # The built-in default written as policy.yaml (what `tau admin policy render` shows);
    # None for an applied policy, whose own text is ``text``.
    builtin_text: str | None = None

    @property
    def builtin(self) -> bool:
        return self.text is None


@dataclass(frozen=True)
class PolicyApplied:
    """What ``Queueing.apply`` did: the policy now in force and, with a policy target,
    the cluster's drift found before applying and what was applied."""

    policy: PolicyInForce
    drift_before: tuple[Drift, ...] = ()
    cluster: ApplyReport | None = None  # None: no policy target (local mode)


class Queueing:
    """``workspaces`` names the workspaces the identity store knows: the built-in policy
    gives each the built-in queue, and errors tell a workspace that exists but has no
    queue in an applied policy from one that does not exist."""

    def __init__(
        self,
        store: PolicyStore,
        machine: Machine,
        workspaces: Callable[[], Iterable[str]] | None = None,
        devices: DeviceInventory | None = None,
        policy_target: PolicyTarget | None = None,
    ) -> None:
        self.store = store
        self.machine = machine
        self.devices = devices  # None: every GPU of the machine is in service
        # Where an applied policy's objects go (a cluster); None: local mode, stored only.
        self.policy_target = policy_target
        self._apply_lock = threading.Lock()  # one apply at a time: cluster and store agree
        self._workspaces = workspaces or (lambda: ())
        self._lock = threading.Lock()
        self._policy = self._load_current()
        self._known: dict[str, Workload] = {}  # by run id, from the last snapshot
        self._known_admitted: dict[str, Admitted] = {}

    @property
    def policy(self) -> PolicyInForce:
        with self._lock:
            return self._policy

    def _builtin(self) -> PolicyInForce:
        names = {g.name for g in self.machine.gpus}
        # One GPU model (the usual box): its flavor carries the type, so specs asking
        # for it by gpu_type fit; mixed or declared GPUs get a flavor of any type.
        gpu_type = (
            short_gpu_type(names.pop()) if len(names) == 1 and "declared" not in names else None
        )
        pol = default_policy(
            len(self.machine.gpus),
            gpu_type,
            self.machine.cpus_millis,
            self.machine.memory_bytes,
            self._workspaces(),
        )
        text = BUILTIN_HEADER + dump_policy(pol)
        return PolicyInForce("built-in default", None, None, None, None, to_domain(pol), text)

    def refresh_workspaces(self) -> None:
        """Workspaces were created or deleted: under the built-in policy each known one
        has the built-in queue (an applied policy says for itself)."""
        with self._lock:
            if self._policy.builtin:
                self._policy = self._builtin()

    def workspace_note(self, workspace: str) -> str | None:
        """What a new workspace lacks before runs can use it, in words; None when the
        policy in force gives it a queue."""
        if any(w == workspace for w, _ in self.policy.domain.local_queues):
            return None
        return f"the policy in force gives workspace '{workspace}' no queue yet; {POLICY_FIX}"

    def _load_current(self) -> PolicyInForce:
        row = self.store.current()
        if row is None:
            return self._builtin()
        loaded = load_policy_text(row["text"], row["source"])
        return _in_force(loaded, row)

    def apply(self, text: str, source: str, applied_by: str | None = None) -> PolicyApplied:
        """Validate, put on the cluster (with a policy target), store durably, then put in
        force. A bad policy raises SpecError with every problem, one that cannot be
        rendered UsageError, one the cluster refuses PolicyApplyFailed, a cluster that
        cannot be read (for the drift) its own error; each leaves the store and the
        policy in force untouched.

        The cluster comes before the store so that the stored policy never names a queue
        the cluster lacks (runs would be created for a LocalQueue Kueue does not know).
        If storing fails after the cluster took the policy, the cluster is ahead of the
        store; applying again (idempotent) brings both to the same policy.
        """
        loaded = load_policy_text(text, source)
        with self._apply_lock:
            drift_before: tuple[Drift, ...] = ()
            report = None
            if self.policy_target is not None:
                drift_before = tuple(self.policy_target.drift(loaded.policy))
                report = self.policy_target.apply(loaded.policy)
                if not report.ok:
                    raise PolicyApplyFailed(report)
            row = self.store.apply(source, text, loaded.policy_hash, applied_by or current_user())
            with self._lock:
                self._policy = _in_force(loaded, row)
                applied = self._policy
        return PolicyApplied(applied, drift_before, report)

    def drift(self) -> list[Drift] | None:
        """How the cluster differs from the policy in force; None without a policy target."""
        if self.policy_target is None:
            return None
        current = self.policy
        text = current.text if current.text is not None else current.builtin_text
        assert text is not None  # the built-in always has its policy.yaml text
        return self.policy_target.drift(load_policy_text(text, current.source).policy)

    # -- submissions --------------------------------------------------------------------
    def admit_fields(self, spec: TauSpec, submitter: str, run_id: str) -> dict[str, Any]:
        """Queue, priority and requests of a new run, or a clear error naming valid choices.

        The queue is the spec's, else the workspace's ``default_queue`` in the policy in
        force, else ``default``: ``fields["queue"]`` is the one used.
        """
        pol = self.policy.domain
        ws = spec.workspace
        queues = sorted(lq for (w, lq) in pol.local_queues if w == ws)
        if not queues and self.policy.builtin and ws in set(self._workspaces()):
            self.refresh_workspaces()  # created through another server on this database
            pol = self.policy.domain
            queues = sorted(lq for (w, lq) in pol.local_queues if w == ws)
        if not queues:
            raise UsageError(self._no_queue(ws, pol))
        lq = spec.queue or pol.default_queue.get(ws) or DEFAULT_QUEUE
        if (ws, lq) not in pol.local_queues:
            raise UsageError(
                f"queue '{lq}' does not exist in workspace '{ws}'; queues: {', '.join(queues)}"
            )
        prio = spec.priority or pol.default_priority
        if prio not in pol.priorities:
            raise UsageError(
                f"priority '{prio}' does not exist; priorities: "
                f"{', '.join(sorted(pol.priorities, key=pol.priorities.__getitem__))}"
            )
        nodes = spec.nodes
        requests = {
            "gpu": spec.resources.gpus * nodes,
            "cpu": (spec.resources.cpus_millis or 0) * nodes,
            "memory": (spec.resources.memory_bytes or 0) * nodes,
        }
        fields = {
            "queue": lq,
            "cluster_queue": pol.local_queues[(ws, lq)],
            "priority": prio,
            "priority_value": pol.priorities[prio],
            "requests": requests,
            "gpu_type": spec.resources.gpu_type,
        }
        why = never_fits(
            workload_of(
                {**fields, "id": run_id, "workspace": ws, "submitter": submitter, "created_at": 0.0}
            ),
            self.snapshot([], []),
        )
        fitting = len(self._devices_for(spec.resources.gpu_type))
        if why is None and requests["gpu"] > fitting:
            why = (
                f"run asks for {requests['gpu']} GPU(s) but this machine has "
                f"{fitting} that fit; start the server "
                "with --gpus N (or TAU_LOCAL_GPUS) to declare more"
            )
        if why:
            raise Unschedulable(why)
        return fields

    def _no_queue(self, ws: str, pol: DomainPolicy) -> str:
        """Why ``ws`` has no queue, and how to give it one: it exists (in the identity
        store) but the applied policy leaves it out, or it does not exist at all."""
        if ws in set(self._workspaces()):
            return (
                f"workspace '{ws}' exists but the policy in force gives it no queue; {POLICY_FIX}"
            )
        known = ", ".join(sorted({w for w, _ in pol.local_queues}))
        if self.policy.builtin:
            return (
                f"workspace '{ws}' does not exist; workspaces: {known} "
                f"(create it: tau admin workspace create {ws})"
            )
        return (
            f"workspace '{ws}' does not exist; workspaces: {known} (create it with tau admin "
            f"workspace create {ws}, then {POLICY_FIX})"
        )

    # -- scheduling ---------------------------------------------------------------------
    def snapshot(
        self,
        queued: Iterable[Row],
        active: Iterable[Row],
        preempted_by: Mapping[str, str] | None = None,
    ) -> Snapshot:
        """``preempted_by``: victim id -> the run its preemption makes room for (known
        while this server runs; after a restart the victim just counts as evicting)."""
        pol = self.policy.domain
        preempted_by = preempted_by or {}
        known = self._known
        workloads: dict[str, Workload] = {}

        def workload(r: Row) -> Workload:
            w = known.get(r["id"])
            if w is None or not _same_workload(w, r):
                w = workload_of(r)
            workloads[w.id] = w
            return w

        admitted = []
        for r in active:
            a = Admitted(
                workload(r),
                r["flavor"] or _first_flavor(pol, r),
                admitted_at=r["updated_at"],
                evicting=r["stop_requested_at"] is not None or r["cancel_requested_at"] is not None,
                preempted_by=preempted_by.get(r["id"]),
            )
            before = self._known_admitted.get(a.workload.id)
            admitted.append(before if before == a else a)
        pending = tuple(workload(r) for r in queued)
        # Objects kept while their row is unchanged: the scheduler (kept between passes,
        # ``domain.scheduling_state``) then finds an unchanged run by identity, and a
        # pass builds no new object for the thousands of runs that did not change.
        if workloads:  # not for a submission's check against an empty cluster
            self._known = workloads
            self._known_admitted = {a.workload.id: a for a in admitted}
        return Snapshot(
            queues=pol.queues,
            flavors=pol.flavors,
            admitted=tuple(admitted),
            pending=pending,
            user_limits=pol.user_limits,
        )

    def _devices_for(self, gpu_type: str | None) -> list[Gpu]:
        return gpus_of_type(list(self.machine.gpus), gpu_type)

    def pick_devices(self, flavor: str, count: int, in_use: set[int]) -> tuple[int, ...] | None:
        """Specific GPUs for an admission: free ones this flavor covers, or None."""
        if count == 0:
            return ()
        fl = self.policy.domain.flavors.get(flavor)
        # A quarantined GPU is given to nobody (the device inventory says which).
        out = self.devices.quarantined() if self.devices is not None else {}
        free = [
            g.index
            for g in self._devices_for(fl.gpu_type if fl else None)
            if g.index not in in_use and g.index not in out
        ]
        return tuple(free[:count]) if len(free) >= count else None


def _same_workload(w: Workload, r: Mapping[str, Any]) -> bool:
    """Whether ``workload_of(r)`` would equal ``w`` (cheaper than building it)."""
    return (
        w.created == float(r["created_at"])
        and w.priority == int(r.get("priority_value") or 0)
        and w.cluster_queue == (r.get("cluster_queue") or "default")
        and w.requests == _requests_of(r)
        and w.workspace == r["workspace"]
        and w.user == r["submitter"]
        and w.gpu_type == r.get("gpu_type")
    )


def _requests_of(r: Mapping[str, Any]) -> Any:
    return r.get("requests") or {"gpu": r.get("gpus", 0), "cpu": 0, "memory": 0}


def workload_of(r: Mapping[str, Any]) -> Workload:
    requests = _requests_of(r)
    return Workload(
        id=r["id"],
        cluster_queue=r.get("cluster_queue") or "default",
        workspace=r["workspace"],
        user=r["submitter"],
        priority=int(r.get("priority_value") or 0),
        created=float(r["created_at"]),
        requests=requests,
        gpu_type=r.get("gpu_type"),
    )


def _first_flavor(pol: DomainPolicy, r: Mapping[str, Any]) -> str:
    cq = pol.queues.get(r.get("cluster_queue") or "default")
    return cq.flavors[0].flavor if cq and cq.flavors else ""


def _in_force(loaded: LoadedPolicy, row: Row) -> PolicyInForce:
    return PolicyInForce(
        row["source"],
        row["text"],
        row["hash"],
        row["applied_at"],
        row["applied_by"],
        to_domain(loaded.policy),
    )
