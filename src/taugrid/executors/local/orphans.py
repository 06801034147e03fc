"""Find and stop what an attempt left running after its supervisor vanished.

The workload's main process dies with its supervisor (``proctree.die_with_us``), but
its children need not: ``sh -c`` children, torchrun workers and anything that started a
session of its own are re-parented to init. Until they are gone they hold the attempt's
GPUs, so the server looks for them (``LocalExecutor.observe``) and SIGKILLs them, and
the run keeps its resources until a scan finds none.

An attempt's processes are recognised by what every workload process inherits: the
environment (``TAU_RUN_ID`` and ``TAU_ATTEMPT``, DESIGN 3.3) and the process group
recorded in status.json. :func:`attempt_processes` decides on plain data (pure);
:func:`process_table` reads /proc at the edge. It costs one pass over /proc per engine
pass, and only for attempts whose supervisor vanished.
"""

from __future__ import annotations

import contextlib
import os
import signal
from dataclasses import dataclass

_MARK_KEYS = (b"TAU_RUN_ID", b"TAU_ATTEMPT")


@dataclass(frozen=True)
class ProcessInfo:
    pid: int
    pgid: int
    state: str  # /proc/<pid>/stat state: R S D Z ...
    run_id: str | None = None  # TAU_RUN_ID in its environment
    attempt: str | None = None  # TAU_ATTEMPT in its environment


def attempt_processes(
    table: list[ProcessInfo], run_id: str, attempt: int, pgid: int | None, exclude: int
) -> list[int]:
    """Pids of the live processes of ``run_id``'s attempt ``attempt``; pure.

    A process is the attempt's when its environment names the run and the attempt, or
    when it is in the workload's process group (a process may clear its environment but
    stays in the group). A group id can be reused once the group is empty, so the group
    only counts when its leader (pid == pgid) is gone or carries the attempt's marks
    itself. Zombies are gone already (they hold no memory and no GPU); ``exclude`` is
    the caller's own pid.
    """
    live = [p for p in table if p.state not in ("Z", "X") and p.pid != exclude]
    marked = {p.pid for p in live if p.run_id == run_id and p.attempt == str(attempt)}
    group_ok = pgid is not None and pgid > 1
    if group_ok:
        leader = next((p for p in live if p.pid == pgid), None)
        group_ok = leader is None or leader.pid in marked
    return sorted(p.pid for p in live if p.pid in marked or (group_ok and p.pgid == pgid))


def process_table(proc: str = "/proc") -> list[ProcessInfo]:
    """Every process this user may inspect, with the marks of its environment."""
    table: list[ProcessInfo] = []
    try:
        names = os.listdir(proc)
    except OSError:
        return table
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"{proc}/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) < 3:
            continue
        marks: dict[bytes, str] = {}
        try:
            with open(f"{proc}/{name}/environ", "rb") as f:
                environ = f.read()
        except OSError:
            environ = b""  # not ours to read, or gone
        for entry in environ.split(b"\0"):
            key, _, value = entry.partition(b"=")
            if key in _MARK_KEYS:
                marks[key] = value.decode("utf-8", "replace")
        table.append(
            ProcessInfo(
                pid=int(name),
                pgid=int(fields[2]),
                state=fields[0].decode("ascii", "replace"),
                run_id=marks.get(b"TAU_RUN_ID"),
                attempt=marks.get(b"TAU_ATTEMPT"),
            )
        )
    return table


def stop_leftovers(run_id: str, attempt: int, pgid: int | None) -> list[int]:
    """SIGKILL every live process of the attempt; the pids found (empty: none left)."""
    pids = attempt_processes(process_table(), run_id, attempt, pgid, exclude=os.getpid())
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return pids
