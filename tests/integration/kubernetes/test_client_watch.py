"""LightkubeClient.watch over a real HTTP stream: the events in order, resuming from a
resourceVersion, 410 Gone (at the start and in the stream), bookmarks, client-side label
filtering, the timeout, and close() from another thread."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator

import pytest

from kube_emulator import KubeEmulator, sample
from taugrid.executors.kubernetes.client import Gone, ObjectRef, WatchEvent, WatchStream
from taugrid.executors.kubernetes.lightkube_client import LightkubeClient

pytestmark = pytest.mark.timeout(20)


class Reader:
    """Reads a watch stream on a thread; the test takes events with a deadline."""

    def __init__(self, stream: WatchStream) -> None:
        self.stream = stream
        self.events: queue.Queue[WatchEvent | BaseException | None] = queue.Queue()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            for event in self.stream:
                self.events.put(event)
        except BaseException as exc:
            self.events.put(exc)
        self.events.put(None)

    def take(self, n: int, timeout: float = 5.0) -> list[tuple[str, str]]:
        out = []
        for _ in range(n):
            item = self.events.get(timeout=timeout)
            assert isinstance(item, WatchEvent), item
            out.append((item.type, item.object["metadata"].get("name", "")))
        return out

    def end(self, timeout: float = 5.0) -> BaseException | None:
        """Wait for the stream to end; what it ended with (None: cleanly)."""
        while True:
            item = self.events.get(timeout=timeout)
            if item is None:
                return None
            if isinstance(item, BaseException):
                assert self.events.get(timeout=timeout) is None
                return item

    def close(self) -> None:
        self.stream.close()
        self.thread.join(5)


@pytest.fixture
def reader_of(kube: LightkubeClient) -> Iterator:
    readers: list[Reader] = []

    def open_reader(**kw) -> Reader:
        reader = Reader(kube.watch("batch/v1", "Job", "team-a", **kw))
        readers.append(reader)
        return reader

    yield open_reader
    for reader in readers:
        reader.close()


def test_existing_objects_then_added_modified_deleted_in_order(
    kube: LightkubeClient, kube_emulator: KubeEmulator, reader_of
):
    kube.create(sample("Job", "old"))
    reader = reader_of()
    assert reader.take(1) == [("ADDED", "old")]
    kube.create(sample("Job", "new"))
    kube_emulator.patch_status("batch/v1", "Job", "team-a", "new", {"active": 1})
    kube_emulator.delete("batch/v1", "Job", "team-a", "old")
    kube_emulator.put(sample("Job", "other", namespace="team-b"))  # another namespace
    assert reader.take(3) == [("ADDED", "new"), ("MODIFIED", "new"), ("DELETED", "old")]
    assert reader.events.empty()


def test_modified_events_carry_the_whole_object(kube: LightkubeClient, kube_emulator: KubeEmulator):
    kube.create(sample("Job", "j"))
    stream = kube.watch("batch/v1", "Job", "team-a", timeout_s=5)
    try:
        assert next(stream).type == "ADDED"
        kube_emulator.patch_status("batch/v1", "Job", "team-a", "j", {"succeeded": 1})
        event = next(stream)
    finally:
        stream.close()
    assert event.type == "MODIFIED"
    assert event.object["status"] == {"succeeded": 1}
    assert event.object["spec"]["template"]["spec"]["containers"][0]["image"]
    assert (event.object["apiVersion"], event.object["kind"]) == ("batch/v1", "Job")


def test_watch_resumes_after_a_resource_version(
    versioned_kube: LightkubeClient, versioned_emulator: KubeEmulator
):
    versioned_kube.create(sample("Job", "a"))
    listed = versioned_kube.list("batch/v1", "Job", "team-a")
    assert listed.resource_version == "1"
    versioned_kube.create(sample("Job", "b"))
    versioned_kube.delete(ObjectRef("batch/v1", "Job", "team-a", "a"))
    stream = versioned_kube.watch(
        "batch/v1", "Job", "team-a", resource_version=listed.resource_version, timeout_s=5
    )
    reader = Reader(stream)
    try:
        assert reader.take(2) == [("ADDED", "b"), ("DELETED", "a")]  # not a again
    finally:
        reader.close()
    assert versioned_emulator.requests("watch")[0].params["resourceVersion"] == "1"


def test_410_at_the_start_of_a_watch_is_gone(
    versioned_kube: LightkubeClient, versioned_emulator: KubeEmulator
):
    versioned_kube.create(sample("Job", "a"))
    versioned_kube.create(sample("Job", "b"))
    versioned_emulator.compact()
    with pytest.raises(
        Gone, match=r"^watch Job team-a/\*: too old resource version: 1 \(HTTP 410\)"
    ):
        versioned_kube.watch("batch/v1", "Job", "team-a", resource_version="1")


def test_an_in_stream_410_error_event_is_gone(kube_emulator: KubeEmulator, reader_of):
    reader = reader_of()
    deadline = time.monotonic() + 5
    while kube_emulator.watch_count() < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert kube_emulator.expire_watches() == 1
    ended = reader.end()
    assert isinstance(ended, Gone)
    assert ended.status == 410


def test_bookmarks_pass_through(kube_emulator: KubeEmulator, reader_of):
    reader = reader_of()
    deadline = time.monotonic() + 5
    while kube_emulator.watch_count() < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    kube_emulator.bookmark("batch/v1", "Job", "42")
    event = reader.events.get(timeout=5)
    assert isinstance(event, WatchEvent)
    assert event.type == "BOOKMARK"
    assert event.object["metadata"]["resourceVersion"] == "42"


def test_labels_filter_the_stream_where_the_server_does_not(
    kube: LightkubeClient, kube_emulator: KubeEmulator, reader_of
):
    mine = {"taugrid.io/managed-by": "taugrid"}
    reader = reader_of(labels=mine)
    kube.create(sample("Job", "theirs", labels={"app": "other"}))
    kube.create(sample("Job", "ours", labels=mine))
    assert reader.take(1) == [("ADDED", "ours")]
    # Relabelled out of the selection: gone from our view, as a real server would say.
    kube_emulator.patch(
        "batch/v1",
        "Job",
        "team-a",
        "ours",
        {"metadata": {"labels": {"taugrid.io/managed-by": "x"}}},
    )
    assert reader.take(1) == [("DELETED", "ours")]
    assert reader.events.empty()
    assert (
        kube_emulator.requests("watch")[0].params["labelSelector"]
        == "taugrid.io/managed-by=taugrid"
    )


def test_close_from_another_thread_ends_a_blocked_watch_promptly(reader_of):
    reader = reader_of(timeout_s=60)
    time.sleep(0.1)  # let it block in recv
    started = time.monotonic()
    reader.close()
    assert not reader.thread.is_alive()
    assert time.monotonic() - started < 1.0
    assert reader.end() is None


def test_watch_ends_after_its_timeout(kube: LightkubeClient):
    started = time.monotonic()
    stream = kube.watch("batch/v1", "Job", "team-a", timeout_s=1)
    assert list(stream) == []
    assert 0.9 < time.monotonic() - started < 3.0


def test_a_cut_stream_ends_the_iterator(kube_emulator: KubeEmulator, reader_of):
    reader = reader_of()
    deadline = time.monotonic() + 5
    while kube_emulator.watch_count() < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert kube_emulator.cut_watches() == 1
    assert reader.end() is None
