"""Pod logs through LightkubeClient. kmock 0.8 would answer GET .../pods/P/log with the Pod
itself, so the emulator serves that route (tests/kube_emulator.py) from lines the test
appends, with container, timestamps, sinceTime and follow."""

from __future__ import annotations

import threading
import time

import pytest

from kube_emulator import KubeEmulator
from taugrid.executors.kubernetes.client import NotFound
from taugrid.executors.kubernetes.lightkube_client import LightkubeClient

pytestmark = pytest.mark.timeout(20)

T1, T2 = "2026-12-01T10:00:00.000001Z", "2026-12-01T10:00:05.000002Z"


def test_logs_line_by_line_with_timestamps(kube: LightkubeClient, kube_emulator: KubeEmulator):
    kube_emulator.append_log("team-a", "p", "main", "step 1\nstep 2\n", ts=T1)
    kube_emulator.append_log("team-a", "p", "main", "done", ts=T2)  # no newline yet
    kube_emulator.append_log("team-a", "p", "sidecar", "not this container\n", ts=T1)
    lines = list(kube.pod_logs("team-a", "p", "main", follow=False))
    assert lines == [f"{T1} step 1\n".encode(), f"{T1} step 2\n".encode(), f"{T2} done".encode()]
    seen = kube_emulator.requests("logs")[0]
    assert seen.path == "/api/v1/namespaces/team-a/pods/p/log"
    assert seen.params == {"container": "main", "timestamps": "true"}


def test_logs_without_timestamps_and_since_a_time(
    kube: LightkubeClient, kube_emulator: KubeEmulator
):
    kube_emulator.append_log("team-a", "p", "main", "early\n", ts=T1)
    kube_emulator.append_log("team-a", "p", "main", "late\n", ts=T2)
    assert list(kube.pod_logs("team-a", "p", "main", follow=False, timestamps=False)) == [
        b"early\n",
        b"late\n",
    ]
    later = kube.pod_logs("team-a", "p", "main", follow=False, since_time=T2, timestamps=False)
    assert list(later) == [b"late\n"]


def test_follow_streams_lines_as_they_come_until_the_container_ends(
    kube: LightkubeClient, kube_emulator: KubeEmulator
):
    kube_emulator.append_log("team-a", "p", "main", "one\n")
    stream = kube.pod_logs("team-a", "p", "main", follow=True, timestamps=False)
    assert next(stream) == b"one\n"
    kube_emulator.append_log("team-a", "p", "main", "two\nthree\n")
    assert next(stream) == b"two\n"
    assert next(stream) == b"three\n"
    kube_emulator.end_log("team-a", "p", "main")
    assert list(stream) == []
    assert kube_emulator.requests("logs")[0].params["follow"] == "true"


def test_a_quiet_followed_log_is_closed_promptly_from_another_thread(
    kube: LightkubeClient, kube_emulator: KubeEmulator
):
    kube_emulator.append_log("team-a", "p", "main", "")
    stream = kube.pod_logs("team-a", "p", "main", follow=True)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.extend(stream), daemon=True)
    reader.start()
    time.sleep(0.1)
    started = time.monotonic()
    stream.close()
    reader.join(5)
    assert not reader.is_alive()
    assert time.monotonic() - started < 1.0
    assert got == []


def test_logs_of_a_missing_pod_are_not_found(kube: LightkubeClient):
    with pytest.raises(NotFound, match=r"^logs Pod team-a/nope: pods \"nope\" not found"):
        kube.pod_logs("team-a", "nope", "main", follow=False)
