"""The informer against the emulator over real HTTP: the exact sequence of changes it
reports through a cut stream, a 410 Gone and a lost event, with and without
resourceVersions on the objects, and that stop() is prompt.

The tests make their changes while the informer cannot see them: they hold its next list
or watch request in the emulator (``hold``), change the store, then release it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from kube_emulator import KubeEmulator, sample
from taugrid.executors.kubernetes.client import WatchEvent
from taugrid.executors.kubernetes.informer import Informer
from taugrid.executors.kubernetes.lightkube_client import LightkubeClient

pytestmark = pytest.mark.timeout(20)

JOBS = ("batch/v1", "Job")


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.objects: list[dict] = []
        self.lock = threading.Lock()

    def __call__(self, event: WatchEvent) -> None:
        with self.lock:
            self.events.append((event.type, event.object["metadata"]["name"]))
            self.objects.append(event.object)

    def take(self, n: int, timeout: float = 5.0) -> list[tuple[str, str]]:
        """The next ``n`` events (waits for them), then checks no more came meanwhile."""
        wait_until(lambda: len(self.events) >= n, timeout, lambda: f"events: {self.events}")
        with self.lock:
            taken, self.events[:] = self.events[:n], self.events[n:]
        return taken

    def quiet(self, seconds: float = 0.2) -> list[tuple[str, str]]:
        """Whatever arrives within ``seconds`` (should be nothing)."""
        time.sleep(seconds)
        with self.lock:
            return list(self.events)


def wait_until(pred: Callable[[], bool], timeout: float, what: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out: {what()}")
        time.sleep(0.005)


@pytest.fixture
def informer_on() -> Iterator[Callable[..., tuple[Informer, Recorder]]]:
    started: list[Informer] = []

    def start(client: LightkubeClient, **kw) -> tuple[Informer, Recorder]:
        recorder = Recorder()
        kw.setdefault("backoff_s", 0.01)
        informer = Informer(client, *JOBS, "team-a", on_change=recorder, **kw)
        informer.start()
        started.append(informer)
        assert informer.wait_synced(5)
        return informer, recorder

    yield start
    for informer in started:
        informer.stop()


def job(name: str) -> dict:
    return sample("Job", name)


def hold_then_change(emu: KubeEmulator, verb: str, change: Callable[[], None]) -> None:
    """Cut the informer's stream, hold its next ``verb`` request, change, release."""
    emu.hold(verb)
    emu.cut_watches()
    wait_until(lambda: emu.held(verb) == 1, 5, lambda: f"{verb} not held")
    change()
    emu.release(verb)


def three_changes(emu: KubeEmulator) -> None:
    emu.put(job("c"))
    emu.patch_status(*JOBS, "team-a", "a", {"active": 1})
    emu.delete(*JOBS, "team-a", "b")


def test_lists_then_reports_live_changes_once(
    kube: LightkubeClient, kube_emulator: KubeEmulator, informer_on
):
    kube.create(job("a"))
    kube.create(job("b"))
    informer, rec = informer_on(kube)
    assert rec.take(2) == [("ADDED", "a"), ("ADDED", "b")]
    kube_emulator.wait_watchers(*JOBS)
    three_changes(kube_emulator)
    assert rec.take(3) == [("ADDED", "c"), ("MODIFIED", "a"), ("DELETED", "b")]
    assert rec.quiet() == []  # the watch's replay of a and b changed nothing
    assert sorted(informer.snapshot()) == [("team-a", "a"), ("team-a", "c")]
    assert informer.get("team-a", "a")["status"] == {"active": 1}
    assert rec.objects[-1]["metadata"]["name"] == "b"  # DELETED carries the object


def test_a_cut_stream_without_versions_relists_and_misses_nothing(
    kube: LightkubeClient, kube_emulator: KubeEmulator, informer_on
):
    kube.create(job("a"))
    kube.create(job("b"))
    informer, rec = informer_on(kube)
    assert rec.take(2) == [("ADDED", "a"), ("ADDED", "b")]
    kube_emulator.wait_watchers(*JOBS)

    # kmock's objects carry no resourceVersion: nothing to resume from, so it relists.
    hold_then_change(kube_emulator, "list", lambda: three_changes(kube_emulator))
    assert rec.take(3) == [("MODIFIED", "a"), ("DELETED", "b"), ("ADDED", "c")]  # key order
    kube_emulator.wait_watchers(*JOBS)
    assert rec.quiet() == []
    assert informer.relists == 2

    kube_emulator.patch_status(*JOBS, "team-a", "c", {"active": 1})
    assert rec.take(1) == [("MODIFIED", "c")]
    assert rec.quiet() == []


def test_a_cut_stream_with_versions_resumes_the_watch_without_relisting(
    versioned_kube: LightkubeClient, versioned_emulator: KubeEmulator, informer_on
):
    emu = versioned_emulator
    versioned_kube.create(job("a"))
    versioned_kube.create(job("b"))
    informer, rec = informer_on(versioned_kube)
    assert rec.take(2) == [("ADDED", "a"), ("ADDED", "b")]
    emu.wait_watchers(*JOBS)
    emu.patch_status(*JOBS, "team-a", "b", {"active": 1})
    assert rec.take(1) == [("MODIFIED", "b")]

    hold_then_change(emu, "watch", lambda: three_changes(emu))
    assert rec.take(3) == [("ADDED", "c"), ("MODIFIED", "a"), ("DELETED", "b")]  # as they came
    assert rec.quiet() == []
    assert informer.relists == 1
    resumed = [r.params.get("resourceVersion") for r in emu.requests("watch")]
    assert resumed == ["2", "3"]  # from the list, then from the last event seen


def test_410_on_resume_relists_and_reports_only_the_difference(
    versioned_kube: LightkubeClient, versioned_emulator: KubeEmulator, informer_on
):
    emu = versioned_emulator
    versioned_kube.create(job("a"))
    versioned_kube.create(job("b"))
    informer, rec = informer_on(versioned_kube)
    assert rec.take(2) == [("ADDED", "a"), ("ADDED", "b")]
    emu.wait_watchers(*JOBS)

    def changes_then_compaction() -> None:
        three_changes(emu)
        emu.compact()  # the informer's version is now too old: its watch gets 410

    hold_then_change(emu, "watch", changes_then_compaction)
    assert rec.take(3) == [("MODIFIED", "a"), ("DELETED", "b"), ("ADDED", "c")]
    emu.wait_watchers(*JOBS)
    assert rec.quiet() == []
    assert informer.relists == 2
    emu.patch_status(*JOBS, "team-a", "c", {"active": 1})
    assert rec.take(1) == [("MODIFIED", "c")]


def test_an_in_stream_410_relists_without_repeating_anything(
    versioned_kube: LightkubeClient, versioned_emulator: KubeEmulator, informer_on
):
    emu = versioned_emulator
    versioned_kube.create(job("a"))
    informer, rec = informer_on(versioned_kube)
    assert rec.take(1) == [("ADDED", "a")]
    emu.wait_watchers(*JOBS)
    assert emu.expire_watches() == 1
    wait_until(lambda: informer.relists == 2, 5, lambda: f"relists {informer.relists}")
    emu.wait_watchers(*JOBS)
    assert rec.quiet() == []
    versioned_kube.create(job("b"))
    assert rec.take(1) == [("ADDED", "b")]


def test_periodic_resync_finds_a_change_whose_event_was_lost(
    kube: LightkubeClient, kube_emulator: KubeEmulator, informer_on
):
    informer, rec = informer_on(kube, resync_s=0.3)
    assert rec.take(0) == []
    kube_emulator.put(job("lost"), silent=True)  # stored, but no watch hears of it
    assert rec.take(1, timeout=3) == [("ADDED", "lost")]
    wait_until(lambda: informer.relists >= 3, 5, lambda: f"relists {informer.relists}")
    assert rec.quiet() == []  # later resyncs find nothing new


def test_selection_by_labels(kube: LightkubeClient, kube_emulator: KubeEmulator, informer_on):
    mine = {"taugrid.io/managed-by": "taugrid"}
    kube.create(sample("Job", "theirs", labels={"app": "x"}))
    kube.create(sample("Job", "ours", labels=mine))
    informer, rec = informer_on(kube, labels=mine)
    assert rec.take(1) == [("ADDED", "ours")]
    kube_emulator.wait_watchers(*JOBS)
    kube.create(sample("Job", "also-theirs", labels={"app": "x"}))
    kube_emulator.patch(
        *JOBS, "team-a", "ours", {"metadata": {"labels": {"taugrid.io/managed-by": "no"}}}
    )
    assert rec.take(1) == [("DELETED", "ours")]
    assert rec.quiet() == []
    assert informer.snapshot() == {}


def test_an_error_is_logged_and_the_informer_recovers(
    kube: LightkubeClient,
    kube_emulator: KubeEmulator,
    informer_on,
    caplog: pytest.LogCaptureFixture,
):
    kube.create(job("a"))
    kube_emulator.fail_next("list", 403, message="jobs.batch is forbidden")
    with caplog.at_level(logging.WARNING, "taugrid.executors.kubernetes.informer"):
        informer, rec = informer_on(kube)
    assert rec.take(1) == [("ADDED", "a")]
    assert informer.relists == 1
    assert [r.getMessage() for r in caplog.records] == [
        "informer Job team-a: list Job team-a/*: jobs.batch is forbidden (HTTP 403)"
    ]


def test_a_failing_callback_does_not_stop_the_informer(
    kube: LightkubeClient, kube_emulator: KubeEmulator, caplog: pytest.LogCaptureFixture
):
    seen: list[str] = []

    def callback(event: WatchEvent) -> None:
        seen.append(event.object["metadata"]["name"])
        if len(seen) == 1:
            raise RuntimeError("a bug in the consumer")

    informer = Informer(kube, *JOBS, "team-a", on_change=callback, backoff_s=0.01)
    with caplog.at_level(logging.ERROR, "taugrid.executors.kubernetes.informer"):
        informer.start()
        try:
            assert informer.wait_synced(5)
            kube_emulator.wait_watchers(*JOBS)
            kube.create(job("a"))
            kube.create(job("b"))
            wait_until(lambda: len(seen) == 2, 5, lambda: f"seen {seen}")
        finally:
            informer.stop()
    assert seen == ["a", "b"]
    assert "the change callback failed on ADDED" in caplog.text


def test_stop_is_prompt_and_no_callback_follows(
    kube: LightkubeClient, kube_emulator: KubeEmulator, informer_on
):
    informer, rec = informer_on(kube, watch_timeout_s=300)
    kube_emulator.wait_watchers(*JOBS)
    started = time.monotonic()
    informer.stop()
    took = time.monotonic() - started
    assert took < 0.5, took
    assert informer._thread is not None and not informer._thread.is_alive()
    kube.create(job("late"))
    assert rec.quiet() == []
    kube_emulator.wait_watchers(*JOBS, n=0)  # its stream was closed, not left open
