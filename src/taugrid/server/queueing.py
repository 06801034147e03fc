"""The server's view of quota policy: which policy is in force, what the machine has, and
the translation between runs and the scheduler's plain workloads.

Decisions themselves are pure functions in :mod:`taugrid.domain.scheduling`; this module
only builds their input and checks submissions against the policy.
"""

from __future__ import annotations

import getpass
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from taugrid.domain.quota import Admitted, Snapshot, Workload
from taugrid.domain.scheduling import never_fits
from taugrid.errors import Unschedulable, UsageError
from taugrid.executors.local.gpus import Gpu, gpus_of_type, short_gpu_type
from taugrid.policy import DomainPolicy, LoadedPolicy, default_policy, load_policy_text, to_domain
from taugrid.spec import TauSpec
from taugrid.store.policies import PolicyStore

Row = dict[str, Any]


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

    @property
    def builtin(self) -> bool:
        return self.text is None


class Queueing:
    def __init__(self, store: PolicyStore, machine: Machine) -> None:
        self.store = store
        self.machine = machine
        self._lock = threading.Lock()
        self._policy = self._load_current()

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
            len(self.machine.gpus), gpu_type, self.machine.cpus_millis, self.machine.memory_bytes
        )
        return PolicyInForce("built-in default", None, None, None, None, to_domain(pol))

    def _load_current(self) -> PolicyInForce:
        row = self.store.current()
        if row is None:
            return self._builtin()
        loaded = load_policy_text(row["text"], row["source"])
        return _in_force(loaded, row)

    def apply(self, text: str, source: str, applied_by: str | None = None) -> PolicyInForce:
        """Validate, store durably, then put in force. A bad policy raises SpecError with
        every problem and leaves the running policy untouched."""
        loaded = load_policy_text(text, source)
        row = self.store.apply(source, text, loaded.policy_hash, applied_by or getpass.getuser())
        with self._lock:
            self._policy = _in_force(loaded, row)
        return self._policy

    # -- submissions --------------------------------------------------------------------
    def admit_fields(self, spec: TauSpec, submitter: str, run_id: str) -> dict[str, Any]:
        """Queue, priority and requests of a new run, or a clear error naming valid choices."""
        pol = self.policy.domain
        ws = spec.workspace
        queues = sorted(lq for (w, lq) in pol.local_queues if w == ws)
        if not queues:
            raise UsageError(
                f"workspace '{ws}' does not exist; workspaces: "
                f"{', '.join(sorted({w for w, _ in pol.local_queues}))}"
            )
        lq = spec.queue
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
            "cpu": round((spec.resources.cpus or 0) * 1000) * nodes,
            "memory": (spec.resources.memory_bytes or 0) * nodes,
        }
        fields = {
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
        return Snapshot(
            queues=pol.queues,
            flavors=pol.flavors,
            admitted=tuple(
                Admitted(
                    workload_of(r),
                    r["flavor"] or _first_flavor(pol, r),
                    admitted_at=r["updated_at"],
                    evicting=r["preempt_requested_at"] is not None
                    or r["cancel_requested_at"] is not None,
                    preempted_by=preempted_by.get(r["id"]),
                )
                for r in active
            ),
            pending=tuple(workload_of(r) for r in queued),
            user_limits=pol.user_limits,
        )

    def _devices_for(self, gpu_type: str | None) -> list[Gpu]:
        return gpus_of_type(list(self.machine.gpus), gpu_type)

    def pick_devices(self, flavor: str, count: int, in_use: set[int]) -> tuple[int, ...] | None:
        """Specific GPUs for an admission: free ones this flavor covers, or None."""
        if count == 0:
            return ()
        fl = self.policy.domain.flavors.get(flavor)
        free = [
            g.index for g in self._devices_for(fl.gpu_type if fl else None) if g.index not in in_use
        ]
        return tuple(free[:count]) if len(free) >= count else None


def workload_of(r: Mapping[str, Any]) -> Workload:
    requests = r.get("requests") or {"gpu": r.get("gpus", 0), "cpu": 0, "memory": 0}
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
