"""Which verbs LightkubeClient retries, how long it waits, and when it gives up: 429 (with
Retry-After), 5xx and lost connections are retried for get, list, apply, delete and the
start of a watch or a log, never for a create (it may have happened: the caller re-reads)."""

from __future__ import annotations

import pytest

from kube_emulator import KubeEmulator, Sleeps, sample
from taugrid.executors.kubernetes.client import (
    ObjectRef,
    ServerError,
    TooManyRequests,
    Unreachable,
)
from taugrid.executors.kubernetes.lightkube_client import LightkubeClient

pytestmark = pytest.mark.timeout(20)

JOB = ObjectRef("batch/v1", "Job", "team-a", "mnist-1")


@pytest.fixture
def job(kube: LightkubeClient) -> dict:
    return kube.create(sample("Job", "mnist-1"))


def test_429_on_get_waits_retry_after_then_succeeds(
    kube: LightkubeClient, kube_emulator: KubeEmulator, sleeps: Sleeps, job: dict
):
    kube_emulator.fail_next("get jobs", 429, retry_after=2)
    assert kube.get(JOB) == job
    assert sleeps == [2.0]  # Retry-After, over the 0.2 s backoff
    assert len(kube_emulator.requests("get")) == 2


def test_429_on_create_is_not_retried(
    kube: LightkubeClient, kube_emulator: KubeEmulator, sleeps: Sleeps
):
    kube_emulator.fail_next("create", 429, retry_after=1)
    with pytest.raises(TooManyRequests):
        kube.create(sample("Job", "mnist-1"))
    assert sleeps == []
    assert len(kube_emulator.requests("create")) == 1
    assert kube_emulator.objects("batch/v1", "Job") == []


def test_5xx_on_get_is_retried_with_doubling_backoff(
    kube: LightkubeClient, kube_emulator: KubeEmulator, sleeps: Sleeps, job: dict
):
    kube_emulator.fail_next("get", 503, times=2)
    kube_emulator.fail_next("get", 500, times=1)
    assert kube.get(JOB) == job
    assert sleeps == [0.2, 0.4, 0.8]


def test_jitter_spreads_the_backoff(tmp_path, kube_emulator: KubeEmulator, job: dict):
    sleeps = Sleeps()
    config = kube_emulator.write_kubeconfig(tmp_path / "kc")
    with LightkubeClient.from_kubeconfig(config, sleep=sleeps, jitter=lambda: 0.0) as client:
        kube_emulator.fail_next("get", 503, times=2)
        client.get(JOB)
    assert sleeps == [0.1, 0.2]  # half the ceiling at the lowest jitter


def test_5xx_that_persists_surfaces_within_the_budget(
    kube: LightkubeClient, kube_emulator: KubeEmulator, sleeps: Sleeps
):
    kube_emulator.fail_next("list", 502, times=100, message="bad gateway")
    with pytest.raises(ServerError, match=r"list Job team-a/\*: bad gateway \(HTTP 502\)"):
        kube.list("batch/v1", "Job", "team-a")
    # 0.2 0.4 0.8 1.6 3.2 (=6.2), then 5.0 (the cap) would pass the 10 s budget
    assert sleeps == [0.2, 0.4, 0.8, 1.6, 3.2]
    assert len(kube_emulator.requests("list")) == len(sleeps) + 1


def test_5xx_on_create_is_not_retried(
    kube: LightkubeClient, kube_emulator: KubeEmulator, sleeps: Sleeps
):
    kube_emulator.fail_next("create", 503)
    with pytest.raises(ServerError):
        kube.create(sample("Job", "mnist-1"))
    assert sleeps == []
    assert len(kube_emulator.requests("create")) == 1


def test_501_is_not_retried(kube: LightkubeClient, kube_emulator: KubeEmulator, sleeps: Sleeps):
    kube_emulator.fail_next("get", 501)
    with pytest.raises(ServerError):
        kube.get(JOB)
    assert sleeps == []


def test_a_lost_connection_is_retried_for_get_but_not_for_create(
    kube: LightkubeClient, kube_emulator: KubeEmulator, sleeps: Sleeps, job: dict
):
    kube_emulator.drop_next("get")
    assert kube.get(JOB) == job
    assert sleeps == [0.2]

    kube_emulator.drop_next("create")
    with pytest.raises(Unreachable, match=r"^create Job team-a/other: no answer from"):
        kube.create(sample("Job", "other"))
    assert sleeps == [0.2]


@pytest.mark.parametrize("verb", ["apply", "delete", "list", "watch", "logs"])
def test_the_other_safe_verbs_are_retried(
    verb: str, kube: LightkubeClient, kube_emulator: KubeEmulator, sleeps: Sleeps, job: dict
):
    kube_emulator.append_log("team-a", "mnist-1-0", "main", "step 1\n")
    kube_emulator.fail_next(verb, 429, retry_after=0.5)
    kube_emulator.fail_next(verb, 503)
    if verb == "apply":
        assert kube.apply(job)["metadata"]["name"] == "mnist-1"
    elif verb == "delete":
        assert kube.delete(JOB) is True
    elif verb == "list":
        assert len(kube.list("batch/v1", "Job", "team-a").items) == 1
    elif verb == "watch":
        stream = kube.watch("batch/v1", "Job", "team-a", timeout_s=5)
        assert next(stream).type == "ADDED"
        stream.close()
    else:
        lines = list(kube.pod_logs("team-a", "mnist-1-0", "main", follow=False, timestamps=False))
        assert lines == [b"step 1\n"]
    assert sleeps == [0.5, 0.4]
    assert kube_emulator.pending_faults() == 0
