"""The local GPU health monitor on real SQLite with the real inventory and a recording
stopper: what it commits, what it stops, what it leaves alone, and what survives a new
monitor (a restarted server)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from recording import Stops
from taugrid.domain.health import Kind, Observation
from taugrid.domain.stops import StopReason
from taugrid.executors.local.gpus import DeclaredGpus, LocalDeviceInventory
from taugrid.health.kmsg import KmsgSource
from taugrid.health.watchdog import Watched
from taugrid.server.health import HealthMonitor
from taugrid.store import connect
from taugrid.store.health import HealthStore


@pytest.fixture
def records(tmp_path: Path) -> HealthStore:
    return HealthStore(connect(f"sqlite:///{tmp_path / 'tau.db'}"))


def monitor(records: HealthStore, stops: Stops, **kw: Any) -> HealthMonitor:
    inventory = LocalDeviceInventory(DeclaredGpus(4).gpus())
    holders = {0: ["train-a"], 2: ["train-b", "train-c"]}
    return HealthMonitor(records, inventory, stops, lambda: holders, kw.pop("sources", []), **kw)


def test_a_fault_is_committed_then_the_gpu_withheld_then_its_runs_stopped(
    records: HealthStore,
) -> None:
    stops = Stops()
    m = monitor(records, stops)
    (done,) = m.inject(2, 79)
    assert done.stopped == ("train-b", "train-c")
    assert [c[:2] for c in stops.calls] == [
        ("train-b", StopReason.HARDWARE),
        ("train-c", StopReason.HARDWARE),
    ]
    assert "Xid 79" in stops.calls[0][2] and "GPU 2" in stops.calls[0][2]
    assert stops.calls[0][3] == done.decision.at  # the fault's time reaches the resume point
    assert m.devices.quarantined() == {2: done.decision.reason}
    (row,) = records.quarantined()
    assert row["gpu"] == "declared-2" and row["level"] == 3
    (event,) = records.events()
    assert event["outcome"] == "applied" and event["runs"] == ["train-b", "train-c"]
    assert m.decisions[(3, "applied", "xid")] == 1 and m.runs_stopped == 2
    # A restarted server keeps it out; a person returns it, once.
    again = monitor(records, Stops())
    assert again.restore() == 1 and again.devices.quarantined() == {2: done.decision.reason}
    assert again.return_gpu(2, "alice") and not again.return_gpu(2, "alice")
    assert again.devices.quarantined() == {} and records.quarantined() == []


def test_shadow_mode_and_an_application_error_touch_nothing(records: HealthStore) -> None:
    stops = Stops()
    shadow = monitor(records, stops, shadow=True)
    (d,) = shadow.inject(0, 79)
    assert d.effects.outcome == "shadow" and stops.calls == []
    assert shadow.devices.quarantined() == {} and records.quarantined() == []
    (d,) = monitor(records, stops).inject(0, 13)
    assert d.effects.outcome == "recorded" and stops.calls == []
    assert [e["outcome"] for e in records.events()] == ["recorded", "shadow"]


def test_the_loop_reads_the_kernel_log_and_a_hang_takes_every_gpu_out(
    records: HealthStore, tmp_path: Path
) -> None:
    log = tmp_path / "kern.log"
    log.write_text("")
    stops = Stops()

    class Hangs:
        name, available, why = "nvml-poll", True, ""

        def read(self, timeout_s: float) -> list[Observation]:
            time.sleep(5)
            return []

        def close(self) -> None:
            pass

    kmsg = KmsgSource(str(log), node="local", pci_to_gpu={})
    m = monitor(
        records,
        stops,
        sources=[
            Watched(kmsg, node="local", deadline_s=0.1),
            Watched(Hangs(), node="local", deadline_s=0.2),
        ],
        breaker=None,
    )
    m.start()
    try:
        with log.open("a") as f:
            f.write("NVRM: Xid (PCI:0000:3b:00): 13, pid=9, Graphics Exception\n")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(records.events()) < 2:
            time.sleep(0.05)
    finally:
        m.stop()
    by_kind = {e["kind"]: e for e in records.events()}
    assert by_kind["xid"]["source"] == "kmsg" and by_kind["xid"]["outcome"] == "recorded"
    hang = by_kind[Kind.NVML_HANG.value]
    assert hang["gpu"] is None and hang["source"] == "nvml-poll"
    assert hang["outcome"] == "applied"  # no GPU named: fail closed, all out
    assert sorted(m.devices.quarantined()) == [0, 1, 2, 3]
