"""Observed admission: an external admitter (Kueue, on a cluster) decides, and the engine
only records. Here the test plays the admitter through the AdmissionSource port."""

from __future__ import annotations

from pathlib import Path

from engine_world import World, make_world

from taugrid.domain.stops import StopReason
from taugrid.ports.admission import AdmissionEvent, AdmissionKind
from taugrid.ports.executor import Placement
from taugrid.server.admission import ObservedAdmission


class TestAdmitter:
    """Events as an admitter reports them, in order."""

    __test__ = False  # not a pytest class

    def __init__(self) -> None:
        self.events: list[AdmissionEvent] = []

    def drain(self) -> list[AdmissionEvent]:
        out, self.events = self.events, []
        return out

    def admit(self, run_id: str, flavor: str = "gpu-a", gpus: tuple[int, ...] = (1,)) -> None:
        placement = Placement(flavor, gpus, host="node-7", nodes=("node-7",))
        self.events.append(AdmissionEvent(AdmissionKind.ADMITTED, run_id, "", placement))

    def evict(self, run_id: str, why: str) -> None:
        self.events.append(AdmissionEvent(AdmissionKind.EVICTED, run_id, why))


def observed_world(tmp_path: Path) -> tuple[World, TestAdmitter]:
    admitter = TestAdmitter()
    world = make_world(tmp_path, admission=ObservedAdmission(admitter, "kueue"))
    return world, admitter


def test_nothing_starts_until_the_admitter_admits_it(tmp_path: Path) -> None:
    world, admitter = observed_world(tmp_path)
    rid = world.submit(resources={"gpus": 1})
    world.step(3)
    assert world.state(rid) == "QUEUED" and not world.executor.launches
    pending = world.engine.pending[rid]
    assert pending.reason == "WaitingForAdmission" and "kueue" in pending.message
    admitter.admit(rid)
    world.step()
    run = world.run(rid)
    assert run["state"] == "ADMITTED" and run["flavor"] == "gpu-a"
    assert "by kueue" in run["message"]
    (attempt,) = world.store.attempts(rid)
    assert attempt["placement"] == {
        "host": "node-7",
        "flavor": "gpu-a",
        "gpus": [1],
        "nodes": ["node-7"],
    }
    (req,) = world.executor.launches
    assert req.placement is not None and req.placement.gpus == (1,)
    assert req.env["CUDA_VISIBLE_DEVICES"] == "1"


def test_an_eviction_stops_the_attempt_and_requeues_the_run(tmp_path: Path) -> None:
    world, admitter = observed_world(tmp_path)
    rid = world.submit(resources={"gpus": 1}, restart={"max": 0})
    admitter.admit(rid)
    world.step()
    world.executor.start(world.key(rid))
    world.step()
    first = world.key(rid)
    admitter.evict(rid, "preempted by kueue: a higher-priority workload")
    world.step(2)
    assert world.executor.attempts[first].stops == [StopReason.PREEMPT]
    run = world.run(rid)
    # A preemption uses no restart: back in its queue even with restart.max 0.
    assert run["state"] == "QUEUED" and run["restarts"] == 0 and run["flavor"] is None
    assert ("PREEMPTED", "Preempted") in world.reasons(rid)
    events = world.store.events(rid)
    assert any("higher-priority workload" in e["message"] for e in events)
    admitter.admit(rid, gpus=(0,))
    world.step()
    assert world.state(rid) == "ADMITTED" and world.key(rid).attempt == 1
    assert world.executor.launches[-1].placement == Placement(
        "gpu-a", (0,), host="node-7", nodes=("node-7",)
    )


def test_an_admission_seen_before_the_run_is_queued_is_held_then_applied(
    tmp_path: Path,
) -> None:
    world, admitter = observed_world(tmp_path)
    admitter.admit("later-00000")  # the admitter saw the workload before the store did
    world.step()
    assert not world.executor.launches
    rid = world.submit("later")
    assert rid == "later-00000"
    world.step()
    assert world.state(rid) == "ADMITTED"


def test_an_eviction_of_a_run_that_is_not_running_changes_nothing(tmp_path: Path) -> None:
    world, admitter = observed_world(tmp_path)
    rid = world.submit()
    admitter.evict(rid, "evicted")
    world.step(2)
    run = world.run(rid)
    assert run["state"] == "QUEUED" and run["stop_reason"] is None
