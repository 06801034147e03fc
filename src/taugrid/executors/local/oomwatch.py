"""Whether the kernel's OOM killer ended one of the workload's processes. Stdlib only
(the supervisor imports it; see ``supervisor``'s docstring for why).

A SIGKILL alone says nothing: ``kill -9``, a watchdog and the OOM killer all send it. Two
sources can say more, and the supervisor records ``oom: true | false | null`` in
status.json from them:

- the kernel log (``/dev/kmsg``): every OOM kill is logged with the victim's pid
  (``oom-kill:...,pid=N,...`` and ``Killed process N (name)``). The supervisor opens it
  at the workload's start positioned at the end, reads it when it becomes readable (it
  is in the supervisor's select set) and checks each victim against the workload's tree
  at once, while the victim is still a zombie that /proc shows. Readable as root, or by
  anyone where ``kernel.dmesg_restrict`` is 0. When it is readable and names no process
  of ours, the answer is ``false``.
- the memory cgroup's ``oom_kill`` counter (cgroup v2 ``memory.events``, v1
  ``memory.oom_control``) of the cgroup the workload started in, before and after; used
  only when the kernel log cannot be read. The cgroup is usually shared with the server
  and other runs, so a rise counts as this workload's only if the workload itself died
  of SIGKILL (or exit 137 from a shell whose child was killed).

A victim can be gone before its record is read: under ``command: python x.py`` the
shell reaps its killed child at once, and a loaded machine may run the supervisor only
after that. Such a victim cannot be placed in the workload's tree; it counts as ours
only by the counter's rule (the workload died of SIGKILL or a shell's 137) and only if
it was read within ``UNPLACED_WINDOW_S`` of the workload's end.

Neither readable: ``null`` (unknown), which is reported as the signal, never as OOM.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable

KMSG = "/dev/kmsg"
_MAX_RECORDS_PER_POLL = 10_000
_RECORD_BYTES = 8192  # a read of /dev/kmsg returns one record; it must fit
# A shell exits within milliseconds of its killed child; seconds leave room for a
# supervisor that a loaded machine runs late, and little for an unrelated OOM kill.
UNPLACED_WINDOW_S = 3.0


def oom_victim(record: bytes) -> int | None:
    """The pid an OOM-kill kernel log record names, or None for any other record.

    ``/dev/kmsg`` records are ``prio,seq,usec,flags;message``; the kill is reported as
    ``oom-kill:constraint=...,task=NAME,pid=N,uid=U`` (kernels >= 4.19) and as
    ``... Killed process N (NAME) ...`` (all kernels).
    """
    message = record.split(b";", 1)[1] if b";" in record else record
    if message.startswith(b"oom-kill:"):
        return _number_after(message, b",pid=")
    return _number_after(message, b"Killed process ")


def _number_after(text: bytes, marker: bytes) -> int | None:
    at = text.find(marker)
    if at == -1:
        return None
    digits = bytearray()
    for byte in text[at + len(marker) :]:
        if not 0x30 <= byte <= 0x39:
            break
        digits.append(byte)
    return int(digits) if digits else None


def oom_kill_count(text: str) -> int | None:
    """The ``oom_kill N`` line of memory.events (v2) or memory.oom_control (v1)."""
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            return int(value)
    return None


def memory_cgroup_counter(pid: int, proc: str = "/proc") -> str | None:
    """Path of the file holding the oom_kill counter of ``pid``'s memory cgroup."""
    try:
        with open(f"{proc}/{pid}/cgroup", encoding="ascii", errors="replace") as f:
            lines = f.read().splitlines()
        with open(f"{proc}/self/mountinfo", encoding="utf-8", errors="replace") as f:
            mounts = f.read().splitlines()
    except OSError:
        return None
    return counter_path(lines, mounts)


def counter_path(cgroup_lines: list[str], mountinfo_lines: list[str]) -> str | None:
    """Pure part of :func:`memory_cgroup_counter`: the v1 memory hierarchy if there is
    one (hybrid systems keep memory on v1), else the v2 unified hierarchy."""
    v1: str | None = None
    v2: str | None = None
    for line in cgroup_lines:
        hid, controllers, path = [*line.split(":", 2), "", ""][:3]
        if "memory" in controllers.split(","):
            v1 = path
        elif hid == "0" and controllers == "":
            v2 = path
    wanted = (("cgroup", v1, "memory.oom_control"), ("cgroup2", v2, "memory.events"))
    for fstype, found, counter in wanted:
        if found is None:
            continue
        path = found
        for mount in mountinfo_lines:
            # id parent dev root mountpoint options [optional...] - fstype source superoptions
            fields = mount.split()
            if "-" not in fields:
                continue
            sep = fields.index("-")
            tail = fields[sep + 1 :]
            if len(tail) < 3 or tail[0] != fstype:
                continue
            if fstype == "cgroup" and "memory" not in tail[2].split(","):
                continue
            root, mountpoint = fields[3], fields[4]
            if root != "/":  # a container sees its own cgroup as the mount's root
                if path != root and not path.startswith(root.rstrip("/") + "/"):
                    continue
                path = path[len(root) :]
            return os.path.join(mountpoint, path.lstrip("/"), counter)
    return None


def _read_counter(path: str | None) -> int | None:
    if path is None:
        return None
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return oom_kill_count(f.read())
    except OSError:
        return None


class OomWatch:
    """Watches one workload from its start to its end; :meth:`verdict` at the end."""

    def __init__(
        self,
        pid: int,
        is_ours: Callable[[int], bool],
        clock: Callable[[], float] = time.monotonic,
        proc: str = "/proc",
    ) -> None:
        self.pid = pid
        self.is_ours = is_ours
        self.clock = clock
        self.proc = proc
        self.ours_killed: set[int] = set()
        self.unplaced_at: float | None = None  # when a victim already gone was read
        self.records_lost = False
        self.kmsg_fd: int | None = None
        try:
            fd = os.open(KMSG, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            os.lseek(fd, 0, os.SEEK_END)  # only what happens from now on
            self.kmsg_fd = fd
        except OSError:
            self.kmsg_fd = None
        self.counter_file: str | None = None
        self.count_before: int | None = None
        if self.kmsg_fd is None:  # the counter is only the fallback
            self.counter_file = memory_cgroup_counter(pid)
            self.count_before = _read_counter(self.counter_file)

    def fileno(self) -> int:
        assert self.kmsg_fd is not None
        return self.kmsg_fd

    @property
    def selectable(self) -> bool:
        return self.kmsg_fd is not None

    def on_ready(self) -> None:
        self.poll()

    def poll(self) -> None:
        """Read the kernel log records that arrived and keep the victims that are ours."""
        if self.kmsg_fd is None:
            return
        for _ in range(_MAX_RECORDS_PER_POLL):
            try:
                record = os.read(self.kmsg_fd, _RECORD_BYTES)
            except BlockingIOError:
                return
            except BrokenPipeError:  # records were overwritten before we read them
                self.records_lost = True
                continue
            except OSError:
                return
            if not record:
                return
            self.on_record(record)

    def on_record(self, record: bytes) -> None:
        victim = oom_victim(record)
        if victim is None:
            return
        if victim == self.pid or self.is_ours(victim):
            self.ours_killed.add(victim)
        elif not os.path.exists(f"{self.proc}/{victim}"):
            self.unplaced_at = self.clock()

    def verdict(self, killed_by_sigkill: bool) -> bool | None:
        """True: the OOM killer ended one of ours; False: a source says it did not;
        None: no source could tell."""
        self.poll()
        if self.ours_killed:
            return True
        unplaced = self.unplaced_at is not None and (
            self.clock() - self.unplaced_at <= UNPLACED_WINDOW_S
        )
        if killed_by_sigkill and unplaced:
            return True
        if self.kmsg_fd is not None and not self.records_lost:
            return False
        after = _read_counter(self.counter_file)
        if after is None or self.count_before is None:
            return None
        if after == self.count_before:
            return False
        return True if killed_by_sigkill else None

    def close(self) -> None:
        if self.kmsg_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.kmsg_fd)
            self.kmsg_fd = None
