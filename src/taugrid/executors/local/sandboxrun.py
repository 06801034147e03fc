"""The supervisor's side of a sandboxed workload: start, signals, exit status, outputs.

Stdlib only, like the supervisor that imports it. How bubblewrap behaves, and what this
module does about it (seen with bwrap 0.8):

- bwrap runs as two processes: the outer one (the supervisor's child, which it waits
  for) and, with ``--unshare-pid``, an init that is pid 1 of the sandbox and the
  workload's parent. ``--new-session`` puts the init and the workload in a new session
  and process group, whose id (the init's pid on the host) is the group the supervisor
  signals; bwrap reports that pid on ``--json-status-fd`` ("child-pid").
- SIGTERM to the outer bwrap kills it at once (no handler), and ``--die-with-parent``
  then SIGKILLs the whole sandbox: no grace. So a stop sends SIGTERM to the workload's
  group and every other process below the supervisor except the outer bwrap; the init
  ignores it (pid 1 of a namespace has no handler), the workload gets it as it would
  unsandboxed and ``stop_grace`` holds. SIGKILL, after the grace, goes to all of them.
- The outer bwrap exits as soon as the workload's main process does, with its status in
  the shell's encoding (n, or 128+n for signal n), and the rest of the sandbox dies
  with it (SIGKILL to what the workload left behind, where an unsandboxed run gives
  them SIGTERM and 1 s). :func:`sandbox.workload_returncode` decodes it.
- Outputs are copied inside a second sandbox with the workload's own identity and view,
  so links the workload planted in its directories cannot make the root supervisor read
  or write anywhere else.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import time
from collections.abc import Callable
from typing import Any

from taugrid.executors.local import proctree, sandbox

START_REPORT_TIMEOUT_S = 10.0
EXIT_REPORT_TIMEOUT_S = 1.0

# Copies each output from the working directory into the outputs directory as the
# workload could itself; prints the name of each one it could not copy, NUL-terminated.
# Arguments: OUT, then NAME SRC DST_PARENT DST per output.
COPY_SCRIPT = r"""
out=$1; shift
while [ "$#" -ge 4 ]; do
  name=$1 src=$2 parent=$3 dst=$4; shift 4
  if [ ! -e "$src" ] && [ ! -L "$src" ]; then printf '%s\0' "$name"; continue; fi
  if [ -e "$dst" ] && [ "$src" -ef "$dst" ]; then continue; fi
  mkdir -p -- "$parent" && cp -a -- "$src" "$parent/" || printf '%s\0' "$name"
done
exit 0
"""


class Sandbox:
    """One sandboxed workload of one supervisor."""

    def __init__(self, desc: dict[str, Any]) -> None:
        self.desc = desc
        self.outer_pid: int | None = None
        self.init_pid: int | None = None
        self.reported_exit: int | None = None
        self._read_fd = -1
        self._write_fd = -1
        self._buffer = b""

    @classmethod
    def from_launch(cls, launch: dict[str, Any]) -> Sandbox | None:
        desc = launch.get("sandbox")
        return cls(desc) if isinstance(desc, dict) else None

    def wrap(self, argv: list[str]) -> tuple[list[str], tuple[int, ...]]:
        """bwrap's command line for ``argv`` and the fds it must inherit."""
        self._read_fd, self._write_fd = os.pipe()
        return sandbox.bwrap_argv(self.desc, argv, self._write_fd), (self._write_fd,)

    def started(self, outer_pid: int) -> int:
        """Record the start; the process group to signal (the sandbox's own)."""
        self.outer_pid = outer_pid
        self._close_write()
        deadline = time.monotonic() + START_REPORT_TIMEOUT_S
        while self.init_pid is None and self._read_more(deadline):
            pass
        return self.init_pid or outer_pid

    def terminate(self, pgid: int) -> None:
        """SIGTERM to the workload's group and everything below us but the outer bwrap."""
        proctree.killpg(pgid, signal.SIGTERM)
        for pid, group, state in proctree.descendants():
            if group != pgid and pid != self.outer_pid and state not in "ZX":
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGTERM)

    def returncode(self, bwrap_returncode: int) -> tuple[int, str | None]:
        """The workload's return code (Popen's convention) and, when the sandbox failed
        before the workload ran, why (bwrap's own message is in the log)."""
        deadline = time.monotonic() + EXIT_REPORT_TIMEOUT_S
        while self.reported_exit is None and self._read_more(deadline):
            pass
        self.close()
        code, failed = sandbox.workload_returncode(bwrap_returncode, self.reported_exit)
        if failed:
            return code, (
                f"the sandbox could not start the workload (bwrap exited {bwrap_returncode}; "
                "its message is in the lines above)"
            )
        return code, None

    def close(self) -> None:
        if self._read_fd >= 0:
            os.close(self._read_fd)
            self._read_fd = -1

    def _close_write(self) -> None:
        if self._write_fd >= 0:
            os.close(self._write_fd)
            self._write_fd = -1

    def _read_more(self, deadline: float) -> bool:
        """Read bwrap's status lines until ``deadline``; False at EOF or time out."""
        if self._read_fd < 0:
            return False
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([self._read_fd], [], [], left)[0]:
            return False
        chunk = os.read(self._read_fd, 4096)
        if not chunk:
            return False
        self._buffer += chunk
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            with contextlib.suppress(ValueError):
                report = json.loads(line)
                if isinstance(report, dict):
                    if isinstance(report.get("child-pid"), int):
                        self.init_pid = report["child-pid"]
                    if isinstance(report.get("exit-code"), int):
                        self.reported_exit = report["exit-code"]
        return True

    def copy_outputs(
        self, launch: dict[str, Any], log_fd: int, note: Callable[[str], None]
    ) -> list[str]:
        """Copy ``outputs`` in a sandbox like the workload's; the ones not copied."""
        outputs = [str(o) for o in launch.get("outputs") or []]
        output_dir = launch.get("output_dir")
        if not outputs or not isinstance(output_dir, str):
            return outputs
        cwd = os.path.normpath(launch["cwd"])
        missing: list[str] = []
        args: list[str] = [output_dir]
        for rel in outputs:
            src = os.path.normpath(os.path.join(cwd, rel))
            if not (src == cwd or src.startswith(cwd + os.sep)):
                missing.append(rel)
                continue
            inner = os.path.relpath(src, cwd)
            dst = os.path.normpath(os.path.join(output_dir, inner))
            if inner == ".":
                args += [rel, "./.", output_dir, output_dir]
            else:
                args += [rel, "./" + inner, os.path.dirname(dst), dst]
        if len(args) == 1:
            return missing
        argv = sandbox.bwrap_argv(self.desc, ["/bin/sh", "-c", COPY_SCRIPT, "sh", *args])
        try:
            done = subprocess.run(
                argv,
                cwd=cwd,
                env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"},
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log_fd,
                close_fds=True,
                check=False,
            )
        except OSError as exc:
            note(f"cannot copy outputs: {exc}")
            return [*missing, *(a for a in args[1::4])]
        failed = [n.decode("utf-8", "surrogateescape") for n in done.stdout.split(b"\0") if n]
        if done.returncode != 0:
            note(f"cannot copy outputs: the copy exited {done.returncode}")
            return [*missing, *(a for a in args[1::4])]
        return [*missing, *failed]
