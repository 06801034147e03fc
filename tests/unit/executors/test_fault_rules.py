"""The pure parts of the supervisor's fault handling: masking, OOM records, disk usage,
and which processes an attempt left behind."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from taugrid.executors.local.diskguard import DiskGuard, nested_roots, size_text, usage_bytes
from taugrid.executors.local.logmask import MASK, SecretMasker, secret_variants
from taugrid.executors.local.oomwatch import (
    UNPLACED_WINDOW_S,
    OomWatch,
    counter_path,
    oom_kill_count,
    oom_victim,
)
from taugrid.executors.local.orphans import ProcessInfo, attempt_processes


def masked(secrets: list[bytes], pieces: list[bytes]) -> bytes:
    m = SecretMasker(secrets)
    return b"".join(m.feed(p) for p in pieces) + m.flush()


def reference(secrets: list[bytes], data: bytes) -> bytes:
    """Leftmost, then longest, non-overlapping occurrences replaced."""
    out, i = [], 0
    ordered = sorted(secrets, key=len, reverse=True)
    while i < len(data):
        hit = next((s for s in ordered if data.startswith(s, i)), None)
        if hit:
            out.append(MASK)
            i += len(hit)
        else:
            out.append(data[i : i + 1])
            i += 1
    return b"".join(out)


def test_secret_masked_whole_and_split_at_every_point() -> None:
    secret = b"hf_abcdefgh"
    text = b"token=" + secret + b" done\n"
    for cut in range(len(text) + 1):
        got = masked([secret], [text[:cut], text[cut:]])
        assert got == b"token=*** done\n", cut
    # one byte per read: the worst split there is
    assert masked([secret], [bytes([b]) for b in text]) == b"token=*** done\n"


@given(
    secrets=st.lists(st.text("ab", min_size=4, max_size=8).map(str.encode), min_size=1, max_size=3),
    data=st.text("abc", max_size=60).map(str.encode),
    cuts=st.lists(st.integers(0, 60), max_size=6),
)
def test_masking_is_independent_of_how_the_stream_is_cut(
    secrets: list[bytes], data: bytes, cuts: list[int]
) -> None:
    bounds = sorted({0, len(data), *(c for c in cuts if c <= len(data))})
    pieces = [data[a:b] for a, b in itertools.pairwise(bounds)]
    assert masked(secrets, pieces) == reference(secrets, data)


def test_only_a_possible_start_of_a_secret_is_held_back() -> None:
    m = SecretMasker([b"secret-value"])
    assert m.feed(b"x" * 100) == b"x" * 100  # nothing that could start it: all out now
    assert m.feed(b"step 3 secr") == b"step 3 "  # "secr" may be the start of it
    assert m.feed(b"ets\n") == b"secrets\n"  # it was not
    assert m.feed(b"a secret-va") == b"a "
    assert m.feed(b"lue!") == b"***!"
    assert m.feed(b"s") == b""
    assert m.flush() == b"s"


def test_secret_variants() -> None:
    pem = "-----BEGIN KEY-----\nAAAAbbbb\n-----END KEY-----\n"
    got = secret_variants(["abc", "tok3n\n", pem])
    assert b"abc" not in got  # too short to mask: it would mask ordinary words
    assert b"tok3n" in got and b"tok3n\n" in got
    assert b"AAAAbbbb" in got and pem.encode() in got
    assert got == sorted(got, key=len, reverse=True)


def test_oom_records_from_the_kernel_log() -> None:
    assert (
        oom_victim(
            b"6,421,1143213922,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),"
            b"cpuset=/,mems_allowed=0,oom_memcg=/a,task_memcg=/a,task=python3,pid=29371,uid=0"
        )
        == 29371
    )
    assert (
        oom_victim(
            b"3,422,1143213956,-;Memory cgroup out of memory: Killed process 29371 (python3) "
            b"total-vm:49468kB"
        )
        == 29371
    )
    assert oom_victim(b"3,1,1,-;Out of memory: Killed process 77 (x)") == 77
    assert oom_victim(b"6,1,1,-;CPU: 0 UID: 0 PID: 29371 Comm: python3") is None
    assert oom_victim(b"6,1,1,-;usb 1-1: new device") is None


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def kill_record(pid: int) -> bytes:
    return f"3,9,1,-;Memory cgroup out of memory: Killed process {pid} (python3)".encode()


def watch_of(tmp_path: Path, ours: set[int], visible: set[int]) -> tuple[OomWatch, Clock]:
    """A watch reading records handed to it, over a /proc that shows ``visible``."""
    for pid in visible:
        (tmp_path / str(pid)).mkdir()
    clock = Clock()
    watch = OomWatch(10, ours.__contains__, clock=clock, proc=str(tmp_path))
    watch.close()  # no kernel log: the records come from the test
    return watch, clock


def test_a_victim_in_the_tree_is_ours_whatever_the_exit(tmp_path: Path) -> None:
    watch, _ = watch_of(tmp_path, ours={11}, visible={11})
    watch.on_record(kill_record(11))
    assert watch.verdict(killed_by_sigkill=False) is True


def test_a_victim_alive_elsewhere_is_not_ours(tmp_path: Path) -> None:
    watch, _ = watch_of(tmp_path, ours=set(), visible={12})
    watch.on_record(kill_record(12))
    assert watch.verdict(killed_by_sigkill=True) is not True


def test_a_victim_gone_before_read_is_ours_only_for_a_sigkill_soon_after(tmp_path: Path) -> None:
    """The shell reaped its killed child before the supervisor read the record."""
    watch, clock = watch_of(tmp_path, ours=set(), visible=set())
    watch.on_record(kill_record(13))
    clock.now += UNPLACED_WINDOW_S / 2
    assert watch.verdict(killed_by_sigkill=False) is not True  # exit 1: not the kill
    assert watch.verdict(killed_by_sigkill=True) is True
    clock.now += UNPLACED_WINDOW_S  # an old kill of someone else's process
    assert watch.verdict(killed_by_sigkill=True) is not True


def test_oom_kill_counters() -> None:
    assert oom_kill_count("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n") == 3  # v1
    assert oom_kill_count("low 0\nhigh 0\nmax 2\noom 1\noom_kill 1\n") == 1  # v2
    assert oom_kill_count("low 0\n") is None


V1_MOUNTS = [
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755",
    "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu",
    "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory",
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw",
]


def test_counter_path_on_a_hybrid_system_uses_the_v1_memory_hierarchy() -> None:
    cgroup = ["9:name=systemd:/", "4:memory:/process_api/abc", "1:cpu:/", "0::/"]
    assert (
        counter_path(cgroup, V1_MOUNTS)
        == "/sys/fs/cgroup/memory/process_api/abc/memory.oom_control"
    )


def test_counter_path_on_v2_and_in_a_container() -> None:
    mounts = ["30 20 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate"]
    assert (
        counter_path(["0::/user.slice/tau"], mounts)
        == "/sys/fs/cgroup/user.slice/tau/memory.events"
    )
    # A container whose cgroup is the mount's root sees its own cgroup at the mount point.
    inner = ["30 20 0:26 /kubepods/pod1 /sys/fs/cgroup rw - cgroup2 cgroup2 rw"]
    assert counter_path(["0::/kubepods/pod1/x"], inner) == "/sys/fs/cgroup/x/memory.events"
    assert counter_path(["0::/elsewhere"], inner) is None
    assert counter_path(["0::/"], []) is None


def test_usage_counts_blocks_once_and_never_follows_symlinks(tmp_path: Path) -> None:
    root = tmp_path / "run"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "data").write_bytes(os.urandom(1 << 20))
    os.link(root / "sub" / "data", root / "hardlink")
    outside = tmp_path / "big"
    outside.write_bytes(os.urandom(4 << 20))
    (root / "link").symlink_to(outside)
    (root / "dirlink").symlink_to(tmp_path, target_is_directory=True)
    used = usage_bytes([str(root)])
    assert (1 << 20) <= used < (1 << 20) + 64 * 1024  # one MiB, plus directories
    reserve = root / "disk.reserve"
    reserve.write_bytes(bytes(256 * 1024))
    assert usage_bytes([str(root)], frozenset({str(reserve)})) == used
    assert nested_roots([str(root), str(root / "sub"), "", str(outside)]) == sorted(
        [str(root), str(outside)]
    )


def test_disk_limit_message_has_the_numbers(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(os.urandom(3 << 20))
    guard = DiskGuard(str(tmp_path), [str(tmp_path)], limit_bytes=1 << 20)
    message = guard.tick(now=0.0)
    assert message is not None and "1.0 MiB (1048576 bytes)" in message
    assert guard.used is not None and guard.used >= 3 << 20
    assert guard.tick(now=0.5) is None  # not measured again this soon
    assert size_text(512) == "512 bytes" and size_text(5 << 20) == "5.0 MiB"


def proc(
    pid: int, pgid: int, state: str = "S", run: str | None = None, k: str | None = None
) -> ProcessInfo:
    return ProcessInfo(pid, pgid, state, run, k)


def test_an_attempts_processes_by_environment_and_group() -> None:
    table = [
        proc(100, 100, run="r1", k="0"),  # the main process (leader of its group)
        proc(101, 100),  # cleared its environment, still in the group
        proc(200, 200, run="r1", k="0"),  # escaped into a session of its own
        proc(201, 200, "Z", run="r1", k="0"),  # a zombie holds nothing
        proc(300, 300, run="r1", k="1"),  # another attempt of the same run
        proc(400, 400, run="r2", k="0"),  # another run
        proc(500, 500),  # unrelated
        proc(7, 100, run="r1", k="0"),  # the caller itself
    ]
    assert attempt_processes(table, "r1", 0, 100, exclude=7) == [100, 101, 200]
    assert attempt_processes(table, "r1", 0, None, exclude=7) == [100, 200]
    assert attempt_processes(table, "r1", 1, None, exclude=7) == [300]


def test_a_reused_group_id_is_not_taken_for_the_attempts() -> None:
    # The workload's group emptied and a stranger now leads a group with that id.
    table = [proc(100, 100), proc(101, 100)]
    assert attempt_processes(table, "r1", 0, 100, exclude=1) == []
    # Its leader gone (killed with the supervisor), members of the group still count.
    assert attempt_processes([proc(101, 100)], "r1", 0, 100, exclude=1) == [101]
    assert attempt_processes([proc(5, 1)], "r1", 0, 1, exclude=2) == []  # never init's group
