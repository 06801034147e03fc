"""Pod logs of cluster runs, archived and served: PodLogArchiver follows the pods through
LightkubeClient against the kmock emulator over HTTP (tests/kube_emulator.py), and
KubeLogSource serves the archive (the LogSource port)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kube_emulator import KubeEmulator, Sleeps
from taugrid.executors.kubernetes.lightkube_client import LightkubeClient
from taugrid.executors.kubernetes.logarchiver import PodLogArchiver, Timing
from taugrid.executors.kubernetes.logs import KubeLogSource
from taugrid.executors.local.logmask import SecretMasker, secret_variants
from taugrid.ports.executor import AttemptKey

pytestmark = pytest.mark.timeout(30)

NS = "team-a"
KEY = AttemptKey("r-logs", 0)
C = "workload"
T1 = "2026-12-01T10:00:00.000001Z"
T1B = "2026-12-01T10:00:00.500000Z"  # the same second as T1
T2 = "2026-12-01T10:00:05.000002Z"
T3 = "2026-12-01T10:00:09.000003Z"
FAST = Timing(initial_s=0.02, cap_s=0.2)


def pod(
    name: str, phase: str = "Running", *, index: int | None = None, nodes: int = 1
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": NS,
        "uid": f"uid-{name}",
        "creationTimestamp": "2026-12-01T09:59:00Z",
        "labels": {"taugrid.io/run-id": KEY.run_id, "taugrid.io/attempt": str(KEY.attempt)},
    }
    container: dict[str, Any] = {"name": C, "image": "ghcr.io/acme/train:1.4"}
    if index is not None:
        meta["annotations"] = {"batch.kubernetes.io/job-completion-index": str(index)}
        container["env"] = [{"name": "NNODES", "value": str(nodes)}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": [container]},
        "status": {"phase": phase},
    }


def client_for(emulator: KubeEmulator, tmp_path: Path, sleeps: Sleeps) -> LightkubeClient:
    config = emulator.write_kubeconfig(tmp_path / "kubeconfig-seconds")
    return LightkubeClient.from_kubeconfig(config, timeout_s=5.0, sleep=sleeps)


def wait_for(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(0.01)


def served(source: KubeLogSource, **kw: Any) -> bytes:
    f = source.open(KEY, **kw)
    if f is None:
        return b""
    with f:
        return f.read()


def archived(root: Path, pod_name: str) -> bytes:
    return (root / KEY.run_id / "attempts" / "0" / "pods" / f"{pod_name}.log").read_bytes()


def end_pod(emulator: KubeEmulator, name: str, phase: str = "Succeeded") -> None:
    emulator.patch_status("v1", "Pod", NS, name, {"phase": phase})
    emulator.end_log(NS, name, C)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "runs"


@pytest.fixture
def archivers(kube: LightkubeClient, root: Path) -> Iterator[list[PodLogArchiver]]:
    made: list[PodLogArchiver] = []
    yield made
    for archiver in made:
        archiver.stop()


@pytest.fixture
def archiver(kube: LightkubeClient, root: Path, archivers: list[PodLogArchiver]) -> PodLogArchiver:
    archivers.append(PodLogArchiver(kube, root, timing=FAST))
    return archivers[-1]


@pytest.fixture
def seconds_emulator() -> Iterator[KubeEmulator]:
    """sinceTime in whole seconds, as a real API server forwards it: resumes repeat lines."""
    with KubeEmulator(since_time_seconds=True) as emulator:
        yield emulator


def test_one_pod_streams_into_the_archive_and_is_served_unprefixed(
    kube_emulator: KubeEmulator, archiver: PodLogArchiver, root: Path
):
    source = KubeLogSource(root)
    assert source.open(KEY) is None  # nothing written yet
    kube_emulator.put(pod("p0", "Pending"))
    archiver.follow(KEY, NS)
    time.sleep(0.2)
    assert archiver.following() == 0  # a waiting container has no log yet
    assert not kube_emulator.requests("logs")

    archiver.pod_seen({"metadata": {"namespace": NS, "labels": "not a map"}})  # no raise
    running = kube_emulator.put(pod("p0"))
    kube_emulator.append_log(NS, "p0", C, "step 1\nstep 2\n", ts=T1)
    archiver.pod_seen(running)  # as the executor's pod informer calls it
    wait_for(lambda: served(source) == b"step 1\nstep 2\n")

    f = source.open(KEY)
    assert f is not None
    assert f.read() == b"step 1\nstep 2\n"
    assert f.read() == b""  # nothing new: no blocking
    kube_emulator.append_log(NS, "p0", C, "step 3\n", ts=T2)
    wait_for(lambda: f.read() == b"step 3\n")
    assert not source.complete(KEY)

    kube_emulator.append_log(NS, "p0", C, "done", ts=T3)  # no newline: the container's end
    end_pod(kube_emulator, "p0")
    wait_for(lambda: source.complete(KEY))
    assert f.read() == b"done\n"
    f.close()
    assert served(source) == b"step 1\nstep 2\nstep 3\ndone\n"
    assert served(source, tail=2) == b"step 3\ndone\n"
    assert archived(root, "p0").startswith(f"{T1} step 1\n".encode())  # stamps kept, not served
    wait_for(lambda: archiver.following() == 0)


def test_a_cut_stream_loses_no_line_and_repeats_none(
    seconds_emulator: KubeEmulator, tmp_path: Path, sleeps: Sleeps, root: Path
):
    with client_for(seconds_emulator, tmp_path, sleeps) as kube:
        archiver = PodLogArchiver(kube, root, timing=FAST)
        try:
            seconds_emulator.put(pod("p0"))
            seconds_emulator.append_log(NS, "p0", C, "same\nsame\n", ts=T1)
            seconds_emulator.append_log(NS, "p0", C, "half\n", ts=T1B)
            archiver.follow(KEY, NS)
            source = KubeLogSource(root)
            wait_for(lambda: served(source) == b"same\nsame\nhalf\n")

            seconds_emulator.cut_logs(NS, "p0")  # mid-way: the container runs on
            seconds_emulator.append_log(NS, "p0", C, "half\n", ts=T1B)  # same stamp, new line
            seconds_emulator.append_log(NS, "p0", C, "after\n", ts=T2)
            wait_for(lambda: served(source) == b"same\nsame\nhalf\nhalf\nafter\n")
            resumed = seconds_emulator.requests("logs")[1].params
            assert resumed["sinceTime"] == T1B  # from the last archived line

            seconds_emulator.cut_logs()
            seconds_emulator.append_log(NS, "p0", C, "last\n", ts=T3)
            end_pod(seconds_emulator, "p0")
            wait_for(lambda: source.complete(KEY))
        finally:
            archiver.stop()
    assert served(source) == b"same\nsame\nhalf\nhalf\nafter\nlast\n"


def test_two_ranks_merge_with_prefixes_and_one_rank_opens_alone(
    kube_emulator: KubeEmulator, archiver: PodLogArchiver, root: Path
):
    kube_emulator.put(pod("job-0-abc", index=0, nodes=2))
    kube_emulator.put(pod("job-1-def", index=1, nodes=2))
    kube_emulator.append_log(NS, "job-0-abc", C, "r0 first\n", ts=T1)
    kube_emulator.append_log(NS, "job-1-def", C, "r1 first\n", ts=T1B)
    kube_emulator.append_log(NS, "job-0-abc", C, "r0 second\n", ts=T2)
    kube_emulator.append_log(NS, "job-1-def", C, "r1 second\n", ts=T3)
    archiver.follow(KEY, NS)
    source = KubeLogSource(root)
    merged = b"[rank 0] r0 first\n[rank 1] r1 first\n[rank 0] r0 second\n[rank 1] r1 second\n"
    wait_for(lambda: served(source) == merged)
    assert served(source, rank=1) == b"r1 first\nr1 second\n"
    assert served(source, rank=0, tail=1) == b"r0 second\n"
    assert served(source, tail=3) == merged.split(b"\n", 1)[1]
    assert source.open(KEY, rank=2) is None
    assert source.ranks(KEY) == {0: ["job-0-abc"], 1: ["job-1-def"]}


def test_a_deleted_pod_keeps_its_archive_served(
    kube_emulator: KubeEmulator, archiver: PodLogArchiver, root: Path
):
    kube_emulator.put(pod("p0"))
    kube_emulator.put(pod("p1", index=1, nodes=2))
    kube_emulator.append_log(NS, "p0", C, "ran to the end\n", ts=T1)
    kube_emulator.append_log(NS, "p1", C, "evicted mid-way\n", ts=T2)
    archiver.follow(KEY, NS)
    source = KubeLogSource(root)
    wait_for(lambda: served(source, rank=1) == b"evicted mid-way\n")

    end_pod(kube_emulator, "p0")
    wait_for(lambda: (root / KEY.run_id / "attempts/0/pods/p0.done").exists())
    # The Job's TTL deletes p0 after its end; p1 is deleted while it runs. The kubelet
    # forgets the logs of both.
    for name in ("p0", "p1"):
        deleted = kube_emulator.get("v1", "Pod", NS, name)
        assert deleted is not None
        kube_emulator.delete("v1", "Pod", NS, name)
        kube_emulator.drop_log(NS, name, C)
        archiver.pod_seen(deleted, deleted=True)
    wait_for(lambda: source.complete(KEY))
    assert served(KubeLogSource(root)) == b"[rank 0] ran to the end\n[rank 1] evicted mid-way\n"
    done = (root / KEY.run_id / "attempts/0/pods/p1.done").read_text()
    assert '"deleted"' in done


def test_a_restarted_archiver_resumes_without_repeats(
    seconds_emulator: KubeEmulator, tmp_path: Path, sleeps: Sleeps, root: Path
):
    source = KubeLogSource(root)
    with client_for(seconds_emulator, tmp_path, sleeps) as kube:
        seconds_emulator.put(pod("p0"))
        seconds_emulator.append_log(NS, "p0", C, "one\n", ts=T1)
        seconds_emulator.append_log(NS, "p0", C, "two\n", ts=T1B)
        first = PodLogArchiver(kube, root, timing=FAST)
        first.follow(KEY, NS)
        wait_for(lambda: served(source) == b"one\ntwo\n")
        first.stop()  # the server stops; the pod runs on
        assert first.following() == 0
        seconds_emulator.append_log(NS, "p0", C, "two\n", ts=T1B)  # same stamp and text
        seconds_emulator.append_log(NS, "p0", C, "three\n", ts=T2)

        second = PodLogArchiver(kube, root, timing=FAST)  # the restarted server
        try:
            second.follow(KEY, NS)
            wait_for(lambda: served(source) == b"one\ntwo\ntwo\nthree\n")
            end_pod(seconds_emulator, "p0", "Failed")
            wait_for(lambda: source.complete(KEY))
        finally:
            second.stop()
        assert seconds_emulator.requests("logs")[1].params["sinceTime"] == T1B
        # A third start finds the archive complete and asks the cluster nothing more.
        calls = len(seconds_emulator.requests("logs"))
        third = PodLogArchiver(kube, root, timing=FAST)
        third.follow(KEY, NS)
        time.sleep(0.3)
        third.stop()
        assert len(seconds_emulator.requests("logs")) == calls
    assert served(source) == b"one\ntwo\ntwo\nthree\n"


def test_secret_values_are_masked_in_the_archive(
    kube: LightkubeClient, kube_emulator: KubeEmulator, archivers: list[PodLogArchiver], root: Path
):
    def make_masker(values: Any) -> Callable[[bytes], bytes]:
        variants = secret_variants(values)

        def mask(line: bytes) -> bytes:
            masker = SecretMasker(variants)
            return masker.feed(line) + masker.flush()

        return mask

    archiver = PodLogArchiver(kube, root, make_masker=make_masker, timing=FAST)
    archivers.append(archiver)
    kube_emulator.put(pod("p0"))
    kube_emulator.append_log(NS, "p0", C, "token=hf_s3cr3t_value ok\n", ts=T1)
    archiver.follow(KEY, NS, secrets=["hf_s3cr3t_value"])
    source = KubeLogSource(root)
    wait_for(lambda: served(source) == b"token=*** ok\n")
    assert b"s3cr3t" not in archived(root, "p0")


def test_an_api_error_is_logged_once_and_retried(
    kube_emulator: KubeEmulator,
    archiver: PodLogArchiver,
    root: Path,
    caplog: pytest.LogCaptureFixture,
):
    kube_emulator.put(pod("p0"))
    kube_emulator.append_log(NS, "p0", C, "fine\n", ts=T1)
    kube_emulator.fail_next("logs", 403, times=3, message="pods/log is forbidden")
    archiver.follow(KEY, NS)
    source = KubeLogSource(root)
    wait_for(lambda: served(source) == b"fine\n")
    warnings = [r.getMessage() for r in caplog.records if "forbidden" in r.getMessage()]
    assert len(warnings) == 1
    assert "\n" not in warnings[0]


def ray_pod(name: str, node_type: str | None, created: str) -> dict[str, Any]:
    obj = pod(name)
    obj["metadata"]["creationTimestamp"] = created
    if node_type is None:  # KubeRay's submitter: its Job's pod, none of TauGrid's labels
        obj["metadata"]["labels"] = {"batch.kubernetes.io/job-name": f"{KEY.run_id}-a0"}
        obj["spec"]["containers"] = [{"name": "ray-job-submitter", "image": "ray"}]
    else:
        obj["metadata"]["labels"]["ray.io/node-type"] = node_type
        obj["spec"]["containers"] = [{"name": f"ray-{node_type}", "image": "ray"}]
    return obj


def test_a_rayjob_is_head_then_workers_then_submitter(
    kube_emulator: KubeEmulator, archiver: PodLogArchiver, root: Path
):
    kube_emulator.put(ray_pod("c-head-x", "head", "2026-12-01T09:00:00Z"))
    kube_emulator.put(ray_pod("c-workers-worker-b", "worker", "2026-12-01T09:00:01Z"))
    kube_emulator.put(ray_pod("c-workers-worker-a", "worker", "2026-12-01T09:00:02Z"))
    kube_emulator.put(ray_pod("r-logs-a0-sub", None, "2026-12-01T09:01:00Z"))
    kube_emulator.append_log(NS, "c-head-x", "ray-head", "head up\n", ts=T1)
    kube_emulator.append_log(NS, "c-workers-worker-b", "ray-worker", "b up\n", ts=T1B)
    kube_emulator.append_log(NS, "c-workers-worker-a", "ray-worker", "a up\n", ts=T2)
    kube_emulator.append_log(NS, "r-logs-a0-sub", "ray-job-submitter", "result 42\n", ts=T3)
    archiver.follow(KEY, NS)
    source = KubeLogSource(root)
    # The four pods' streams are followed concurrently: each reaches the archive in its
    # own time, and the merged log is in rank order whichever came first.
    expected = b"[rank 0] head up\n[rank 1] b up\n[rank 2] a up\n[rank 3] result 42\n"
    wait_for(lambda: source.ranks(KEY).get(3) == ["r-logs-a0-sub"] and served(source) == expected)
    assert served(source, rank=3) == b"result 42\n"  # the job's output


def test_the_watchdog_resumes_an_idle_stream_and_ends_one_left_open(
    kube: LightkubeClient, kube_emulator: KubeEmulator, archivers: list[PodLogArchiver], root: Path
):
    timing = Timing(initial_s=0.02, cap_s=0.2, idle_s=0.3, end_grace_s=0.3)
    archiver = PodLogArchiver(kube, root, timing=timing, watchdog_s=0.05)
    archivers.append(archiver)
    running = kube_emulator.put(pod("p0"))
    kube_emulator.append_log(NS, "p0", C, "before\n", ts=T1)
    archiver.follow(KEY, NS)
    source = KubeLogSource(root)
    wait_for(lambda: served(source) == b"before\n")
    # Quiet past idle_s: the stream is closed and followed again, losing and repeating
    # nothing (a connection that died silently would otherwise hold it for good).
    wait_for(lambda: len(kube_emulator.requests("logs")) >= 2)
    kube_emulator.append_log(NS, "p0", C, "after\n", ts=T2)
    wait_for(lambda: served(source) == b"before\nafter\n")
    # The pod ended but its stream stays open (a kubelet that never closed it): the
    # informer's word is enough, after end_grace_s.
    kube_emulator.patch_status("v1", "Pod", NS, "p0", {"phase": "Succeeded"})
    archiver.pod_seen({**running, "status": {"phase": "Succeeded"}})
    wait_for(lambda: source.complete(KEY))
    assert served(source) == b"before\nafter\n"


def test_two_archivers_on_one_archive_do_not_repeat_lines(
    kube: LightkubeClient,
    kube_emulator: KubeEmulator,
    archivers: list[PodLogArchiver],
    root: Path,
    caplog: pytest.LogCaptureFixture,
):
    kube_emulator.put(pod("p0"))
    kube_emulator.append_log(NS, "p0", C, "once\n", ts=T1)
    for _ in range(2):
        archivers.append(PodLogArchiver(kube, root, timing=FAST))
        archivers[-1].follow(KEY, NS)
    source = KubeLogSource(root)
    wait_for(lambda: served(source) == b"once\n")
    wait_for(lambda: any("another follower" in r.getMessage() for r in caplog.records))
    end_pod(kube_emulator, "p0")
    wait_for(lambda: source.complete(KEY))
    assert served(source) == b"once\n"
