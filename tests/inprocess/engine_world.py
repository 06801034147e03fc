"""The world of the in-process engine tests: the engine on the fake executor, a real
store (SQLite in a temporary directory), the real admission strategies and lifecycle
decisions, no processes. A test steps the engine by hand and says, through the fake,
what each attempt does."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from taugrid.domain.states import Reason, RunState
from taugrid.executors.fake import FakeExecutor
from taugrid.executors.local.artifacts import LocalArtifactStore
from taugrid.executors.local.layout import RunLayout
from taugrid.executors.local.secrets import LocalSecretStore
from taugrid.ports.devices import Gpu
from taugrid.ports.executor import AttemptKey
from taugrid.server.admission import AdmissionStrategy, InternalAdmission
from taugrid.server.engine import RunEngine
from taugrid.server.queueing import Machine, Queueing
from taugrid.spec import TauSpec
from taugrid.spec.loader import resolved_data
from taugrid.store import RunStore, connect
from taugrid.store.policies import PolicyStore
from taugrid.store.runs import Row, Transition


@dataclass
class Clock:
    now: float = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class World:
    store: RunStore
    executor: FakeExecutor
    queueing: Queueing
    layout: RunLayout
    clock: Clock
    engine: RunEngine
    admission: AdmissionStrategy
    _made: list[str] = field(default_factory=list)

    def submit(self, name: str = "train", **spec: Any) -> str:
        full = TauSpec.model_validate({"name": name, "command": ["python", "train.py"], **spec})
        run_id = f"{name}-{len(self._made):05d}"
        self._made.append(run_id)
        fields = self.queueing.admit_fields(full, "ann", run_id)
        row = {
            "id": run_id,
            "name": name,
            "workspace": "default",
            "priority": fields.pop("priority", None),
            "submitter": "ann",
            "idempotency_key": None,
            "spec_source": "tau.yaml",
            "spec_file_text": None,
            "spec_overrides": [],
            "spec_resolved": resolved_data(full),
            "spec_hash": "h" * 64,
            "snapshot_digest": "d" * 64,
            "env_summary": {"PATH": "/usr/bin:/bin"},
            "gpus": full.resources.gpus,
            **fields,
        }
        self.store.create_run(
            row,
            [
                Transition(RunState.PENDING, Reason.SUBMITTED, "submitted"),
                Transition(RunState.QUEUED, Reason.QUEUED, "queued"),
            ],
        )
        self.engine.wake()  # as the service does after a submit
        return run_id

    def cancel(self, run_ids: list[str]) -> None:
        """As the service does it: record the cancels, then wake the engine."""
        self.store.cancel_many(run_ids)
        self.engine.wake()

    def step(self, times: int = 1) -> None:
        for _ in range(times):
            self.engine.step()

    def run(self, run_id: str) -> Row:
        row = self.store.get(run_id)
        assert row is not None
        return row

    def state(self, run_id: str) -> str:
        return str(self.run(run_id)["state"])

    def key(self, run_id: str) -> AttemptKey:
        return AttemptKey(run_id, self.run(run_id)["attempt_count"] - 1)

    def reasons(self, run_id: str) -> list[tuple[str, str]]:
        return [(e["to_state"], e["reason"]) for e in self.store.events(run_id)]

    def checkpoint(self, run_id: str, step: int, written_at: float) -> None:
        """A checkpoint as the SDK writes it, with its manifest's time."""
        from taugrid.sdk import checkpoint as ckpt

        root = self.layout.checkpoint_dir(run_id)
        root.mkdir(parents=True, exist_ok=True)
        with ckpt.saving(step, root=root) as d:
            (d / "model.bin").write_bytes(b"w" * 64)
        _set_manifest_time(root / f"step-{step:010d}", written_at)


def _set_manifest_time(path: Path, at: float) -> None:
    import json

    manifest = path / "tau-checkpoint.json"
    data = json.loads(manifest.read_text())
    data["time"] = at
    manifest.write_text(json.dumps(data))


def make_world(
    tmp_path: Path,
    *,
    gpus: int = 2,
    admission: AdmissionStrategy | None = None,
    stop_ends_at_once: bool = True,
) -> World:
    db = connect(f"sqlite:///{tmp_path / 'tau.db'}")
    store = RunStore(db)
    clock = Clock()
    machine = Machine(
        tuple(Gpu(i, f"declared-{i}", "declared") for i in range(gpus)), 8000, 1 << 34
    )
    queueing = Queueing(PolicyStore(db), machine, lambda: ["default"])
    executor = FakeExecutor(stop_ends_at_once=stop_ends_at_once, clock=clock)
    layout = RunLayout(tmp_path / "runs")
    strategy = admission or InternalAdmission(queueing, store.gpus_in_use)
    engine = RunEngine(
        store,
        executor,
        strategy,
        artifacts=LocalArtifactStore(layout),
        secrets=LocalSecretStore(tmp_path / "secrets"),
        clock=clock,
        starts_inline=True,
    )
    executor.notify = engine.attempt_reported  # as supervisors push their status
    return World(store, executor, queueing, layout, clock, engine, strategy)
