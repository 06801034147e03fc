"""The pure parts of cluster pod logs (executors/kubernetes/loglines.py) and the archive's
files read back (logarchive.py, logs.py): resume dedupe, ranks, prefixes, merge, tail."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from taugrid.executors.kubernetes.logarchive import PodArchive, pods_dir
from taugrid.executors.kubernetes.loglines import (
    PodMeta,
    ResumeFilter,
    ResumePoint,
    assign_ranks,
    container_started,
    parse_line,
    pod_meta,
    prefixed,
    split_lines,
    timestamp_ns,
)
from taugrid.executors.kubernetes.logs import ArchiveStream, KubeLogSource
from taugrid.ports.executor import AttemptKey
from taugrid.ports.logs import LogSource

KEY = AttemptKey("r-unit", 2)


def L(ts: str, text: str) -> bytes:
    return f"{ts} {text}\n".encode()


# -- timestamps ----------------------------------------------------------------------------
def test_timestamps_compare_as_instants_not_strings():
    whole = timestamp_ns("2026-12-01T10:00:05Z")
    half = timestamp_ns("2026-12-01T10:00:05.5Z")
    nano = timestamp_ns("2026-12-01T10:00:05.000000001Z")
    assert whole is not None and half is not None and nano is not None
    assert whole < nano < half  # as strings "05Z" > "05.5Z"
    assert timestamp_ns("2026-12-01T11:00:05+01:00") == whole
    assert timestamp_ns("not a time") is None
    assert timestamp_ns("2026-12-01T10:00:05") is None  # no zone: not the kubelet's


def test_a_line_without_a_stamp_keeps_its_text_and_the_previous_time():
    line = parse_line(b"garbage without stamp\n", previous_ns=1_796_119_205_000_000_007)
    assert line.content == b"garbage without stamp\n"
    assert line.ts == b"2026-12-01T10:00:05.000000007Z"
    assert parse_line(line.archived()) == line  # archived and read back, unchanged
    last = parse_line(b"2026-12-01T10:00:05Z done")  # the container's last, unterminated
    assert last.content == b"done\n"
    assert last.archived() == b"2026-12-01T10:00:05Z done\n"


# -- resuming ------------------------------------------------------------------------------
T1, T1B, T2 = "2026-12-01T10:00:00.1Z", "2026-12-01T10:00:00.7Z", "2026-12-01T10:00:03Z"


def resumed(archived: list[bytes], again: list[bytes]) -> list[bytes]:
    keep = ResumeFilter(ResumePoint.of(parse_line(raw) for raw in archived))
    return [raw for raw in again if keep.admit(parse_line(raw))]


def test_resume_drops_what_is_archived_even_when_sincetime_is_in_whole_seconds():
    archived = [L(T1, "a"), L(T1B, "b")]
    # The API server sends the kubelet 10:00:00: the whole second again, then new lines.
    again = [L(T1, "a"), L(T1B, "b"), L(T1B, "c"), L(T2, "d")]
    assert resumed(archived, again) == [L(T1B, "c"), L(T2, "d")]


def test_resume_counts_identical_lines_at_one_instant():
    archived = [L(T1, "tick"), L(T1, "tick")]
    again = [L(T1, "tick"), L(T1, "tick"), L(T1, "tick"), L(T2, "tock")]
    assert resumed(archived, again) == [L(T1, "tick"), L(T2, "tock")]


def test_once_past_the_resume_point_everything_passes():
    archived = [L(T1B, "b")]
    # a clock stepping back after a new line must not lose later lines
    again = [L(T1B, "b"), L(T2, "new"), L(T1, "stepped back"), L(T1B, "b")]
    assert resumed(archived, again) == again[1:]


def test_an_empty_archive_admits_everything():
    assert resumed([], [L(T1, "a"), L(T1, "a")]) == [L(T1, "a"), L(T1, "a")]
    assert ResumePoint().since_time is None
    assert ResumePoint.of([parse_line(L(T1B, "b"))]).since_time == T1B


# -- pods and ranks ------------------------------------------------------------------------
def pod(
    name: str,
    *,
    labels: dict[str, str] | None = None,
    index: int | None = None,
    nodes: int | None = None,
    containers: tuple[str, ...] = ("workload",),
    created: str = "2026-12-01T09:00:00Z",
    status: dict[str, Any] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels or {}, "creationTimestamp": created}
    if index is not None:
        meta["annotations"] = {"batch.kubernetes.io/job-completion-index": str(index)}
    specs: list[dict[str, Any]] = [{"name": c} for c in containers]
    if nodes is not None:
        specs[0]["env"] = [{"name": "NNODES", "value": str(nodes)}]
    return {"metadata": meta, "spec": {"containers": specs}, "status": status or {}}


def test_what_each_kind_of_pod_is():
    job = pod_meta(pod("j", containers=("upload", "workload")))  # a sidecar beside it
    assert (job.role, job.container, job.multi) == ("job", "workload", False)
    one = pod_meta(pod("i0", index=0, nodes=1))
    assert (one.role, one.index, one.multi) == ("indexed", 0, False)
    two = pod_meta(pod("i1", index=1, nodes=2))
    assert (two.role, two.index, two.multi) == ("indexed", 1, True)
    head = pod_meta(pod("h", labels={"ray.io/node-type": "head"}, containers=("ray-head",)))
    assert (head.role, head.container, head.multi) == ("head", "ray-head", True)
    worker = pod_meta(pod("w", labels={"ray.io/node-type": "worker"}, containers=("ray-worker",)))
    assert (worker.role, worker.container) == ("worker", "ray-worker")
    sub = pod_meta(pod("s", containers=("ray-job-submitter",)))
    assert (sub.role, sub.container) == ("submitter", "ray-job-submitter")
    assert PodMeta.from_json({**sub.to_json(), "later": 1}) == sub


def test_ranks_of_indexed_jobs_and_rayjobs():
    assert assign_ranks([PodMeta("j", "", "workload", "job")]) == {"j": 0}
    indexed = [PodMeta(f"i{k}", "", "workload", "indexed", k) for k in (2, 0, 1)]
    assert assign_ranks(indexed) == {"i0": 0, "i1": 1, "i2": 2}
    ray = [
        PodMeta("sub", "", "ray-job-submitter", "submitter", created="09:05"),
        PodMeta("w-b", "", "ray-worker", "worker", created="09:01"),
        PodMeta("w-a", "", "ray-worker", "worker", created="09:02"),
        PodMeta("head", "", "ray-head", "head", created="09:00"),
    ]
    assert assign_ranks(ray) == {"head": 0, "w-b": 1, "w-a": 2, "sub": 3}


def test_prefix_when_the_attempt_has_several_pods():
    single = [PodMeta("j", "", "workload", "job")]
    assert not prefixed(single, assign_ranks(single))
    first_of_two = [PodMeta("i0", "", "workload", "indexed", 0, multi=True)]
    assert prefixed(first_of_two, assign_ranks(first_of_two))  # before rank 1 writes
    replaced = [PodMeta(p, "", "workload", "indexed", 0) for p in ("i0-a", "i0-b")]
    assert not prefixed(replaced, assign_ranks(replaced))  # one rank, two pods in turn


def test_a_waiting_container_has_no_log_yet():
    waiting = {"name": "workload", "state": {"waiting": {"reason": "ContainerCreating"}}}
    assert not container_started(pod("p", status={"phase": "Pending"}), "workload")
    assert not container_started(
        pod("p", status={"phase": "Running", "containerStatuses": [waiting]}), "workload"
    )
    done = {"name": "workload", "state": {"terminated": {"exitCode": 0}}}
    assert container_started(
        pod("p", status={"phase": "Succeeded", "containerStatuses": [done]}), "workload"
    )


# -- the archive read back -----------------------------------------------------------------
def write_pod(root: Path, meta: PodMeta, lines: list[bytes], *, done: bool = False) -> Path:
    directory = pods_dir(root, KEY)
    archive = PodArchive(directory, meta)
    archive.open()
    archive.append([parse_line(raw) for raw in lines])
    if done:
        archive.finish("Succeeded")
    archive.close()
    return directory / f"{meta.pod}.log"


def test_reopening_cuts_a_torn_line_and_finds_the_resume_point(tmp_path: Path):
    meta = PodMeta("p", "", "workload", "job")
    path = write_pod(tmp_path, meta, [L(T1, "a"), L(T1B, "b"), L(T1B, "c")])
    with path.open("ab") as f:
        f.write(b"2026-12-01T10:00:03Z tor")  # a crash in the middle of a write
    archive = PodArchive(path.parent, meta)
    point = archive.open()
    archive.close()
    assert path.read_bytes().endswith(L(T1B, "c"))
    assert point.since_time == T1B
    assert dict(point.at_ts) == {b"b\n": 1, b"c\n": 1}


def test_the_resume_point_spans_blocks_of_lines_at_one_instant(tmp_path: Path):
    meta = PodMeta("p", "", "workload", "job")
    many = [L(T1B, "x" * 100)] * 2000  # more than a 64 KiB block at one timestamp
    write_pod(tmp_path, meta, [L(T1, "before"), *many])
    point = PodArchive(pods_dir(tmp_path, KEY), meta).open()
    assert point.at_ts[b"x" * 100 + b"\n"] == 2000


def test_merged_stream_orders_by_time_prefixes_and_tails(tmp_path: Path):
    r0 = PodMeta("i0", "", "workload", "indexed", 0, multi=True)
    r1 = PodMeta("i1", "", "workload", "indexed", 1, multi=True)
    write_pod(tmp_path, r0, [L(T1, "a0"), L(T2, "c0")], done=True)
    write_pod(tmp_path, r1, [L(T1B, "b1")])
    source: LogSource = KubeLogSource(tmp_path)
    f = source.open(KEY)
    assert f is not None
    assert f.read(5) == b"[rank"
    assert f.read() == b" 0] a0\n[rank 1] b1\n[rank 0] c0\n"
    with (pods_dir(tmp_path, KEY) / "i1.log").open("ab") as log:
        log.write(L("2026-12-01T10:00:04Z", "d1") + b"2026-12-01T10:00:05Z parti")
    assert f.read() == b"[rank 1] d1\n"  # the torn line waits for its end
    f.close()
    tail = source.open(KEY, tail=2)
    assert tail is not None and tail.read() == b"[rank 0] c0\n[rank 1] d1\n"
    kube = KubeLogSource(tmp_path)
    only = kube.open(KEY, rank=1, tail=5)
    assert only is not None and only.read() == b"b1\nd1\n"
    assert kube.open(AttemptKey("r-unit", 3)) is None
    assert not kube.complete(KEY)


def test_complete_when_every_pod_has_ended(tmp_path: Path):
    write_pod(tmp_path, PodMeta("p", "", "workload", "job"), [L(T1, "a")], done=True)
    source = KubeLogSource(tmp_path)
    assert source.complete(KEY)
    done = json.loads((pods_dir(tmp_path, KEY) / "p.done").read_text())
    assert done == {"end": "Succeeded"}
    f = ArchiveStream(pods_dir(tmp_path, KEY), tail=None, rank=None)
    assert not f.complete  # not all of it was read yet
    assert f.read() == b"a\n"
    assert f.complete


@pytest.mark.parametrize(("tail", "expected"), [(0, b""), (1, b"b\n"), (3, b"a\nb\n")])
def test_tail_of_one_pod(tmp_path: Path, tail: int, expected: bytes):
    write_pod(tmp_path, PodMeta("p", "", "workload", "job"), [L(T1, "a"), L(T2, "b")])
    f = KubeLogSource(tmp_path).open(KEY, tail=tail)
    assert f is not None
    assert f.read() == expected


def test_lines_are_cut_at_newlines_only():
    assert split_lines(b"10%\r20%\rdone\nnext\npart") == [b"10%\r20%\rdone\n", b"next\n", b"part"]
    assert split_lines(b"") == []
    assert split_lines(b"a\n") == [b"a\n"]


def test_a_progress_bar_is_served_as_it_was_written(tmp_path: Path):
    bar = L(T1, "10%\r50%\r100%")
    write_pod(tmp_path, PodMeta("p", "", "workload", "job"), [bar, L(T2, "next")])
    f = KubeLogSource(tmp_path).open(KEY)
    assert f is not None and f.read() == b"10%\r50%\r100%\nnext\n"
    point = PodArchive(pods_dir(tmp_path, KEY), PodMeta("p", "", "workload", "job")).open()
    assert point.since_time == T2
