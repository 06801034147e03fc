"""The nodes of one attempt, all on this machine (``nodes: N`` in local mode). Stdlib only
(the supervisor imports it; see ``supervisor``'s docstring for why).

launch.json's ``nodes`` holds, per node, its command and what its launcher adds to the
environment (``launch.launch_nodes``: the rendezvous, ``NODE_RANK``, the node's slice of
the GPUs), as the cluster's Indexed Job gives each pod. The attempt's supervisor (the
*group*) forks one *node supervisor* per node, and each is, for its node, what the
supervisor of a ``nodes: 1`` attempt is: the workload in a process group of its own,
PR_SET_PDEATHSIG, a child subreaper of its own (what a node's processes leave behind is
the node's), the OOM watch, the sandbox, SIGTERM, ``stop_grace``, SIGKILL on a stop, and
the node's stray processes stopped once its main process exits. A node supervisor
reports to the group on a pipe (its "running" and "exited" statuses as JSON lines), not
in status.json, and dies with the group (PR_SET_PDEATHSIG) as its workload dies with it.

The group runs the attempt as one unit:

- it is "running" once every node is, and succeeds only when every node exits 0;
- the first node seen to fail (any other end, a start failure, a node supervisor gone
  without a result) fails the attempt: the other nodes are stopped (SIGTERM to their
  supervisors, which stop their trees as for a cancel) and the attempt takes that node's
  exit code, signal, OOM verdict and disk finding; status.json names it
  (``failed_node``; ``nodes``: how each node ended) and says it in words (``detail``,
  and a line in output.log);
- cancel, timeout and the disk limit are the group's, and stop every node; a node
  supervisor still there ``KILL_MARGIN_S`` after the grace is SIGKILLed (its workload
  dies with it), and whatever is left below the group at the end is too;
- outputs are copied once, by the group, when every node is gone.

Output: every node's stdout and stderr reach the one output.log through a pipe its
supervisor copies, each line prefixed ``[node i] `` (:class:`NodeLines`), secrets masked
as for one node. Each write holds whole lines only, and appends of whole lines to one
file never mix within a line, so nodes' lines never interleave mid-line. A line that
does not end within ``MAX_LINE_BYTES`` is cut there.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

from taugrid.executors.local import diskguard, logmask, proctree, sandboxrun, supervisor

MAX_LINE_BYTES = 64 * 1024
# A stopped node's supervisor has its grace, and this much more, to report and exit.
KILL_MARGIN_S = 5.0
LEFTOVER_WAIT_S = 2.0
_STOP_SIGNALS = {signal.SIGTERM}
# Outcomes of the group's own stops (every node stopped), as for one node.
GROUP_STOPS = ("cancelled", "timeout", "disk_limit")


def node_prefix(index: int) -> str:
    return f"[node {index}] "


# -- pure parts ----------------------------------------------------------------------------
class NodeLines:
    """Prefixes every line of a node's output with ``prefix`` and passes on whole lines
    only (the rest waits for its end, or for :meth:`flush`); ``inner`` (the secret
    masker) sees the bytes first. Pure (no I/O)."""

    def __init__(self, prefix: bytes, inner: logmask.StreamFilter | None = None) -> None:
        self.prefix = prefix
        self.inner = inner
        self._partial = b""

    def feed(self, data: bytes) -> bytes:
        if self.inner is not None:
            data = self.inner.feed(data)
        return self._lines(self._partial + data, final=False)

    def flush(self) -> bytes:
        tail = self.inner.flush() if self.inner is not None else b""
        return self._lines(self._partial + tail, final=True)

    def _lines(self, buf: bytes, *, final: bool) -> bytes:
        lines = buf.split(b"\n")
        rest = lines.pop()
        while len(rest) >= MAX_LINE_BYTES:  # a line that does not end: cut it
            lines.append(rest[:MAX_LINE_BYTES])
            rest = rest[MAX_LINE_BYTES:]
        if final and rest:
            lines.append(rest)
            rest = b""
        self._partial = rest
        return b"".join(self.prefix + line + b"\n" for line in lines)


def node_launch(launch: Mapping[str, Any], node: Mapping[str, Any]) -> dict[str, Any]:
    """What a node's supervisor runs: the attempt's launch with the node's command and
    environment; timeout, disk limit, outputs and the server are the group's."""
    return {
        **launch,
        "command": node["command"],
        "env": {**launch["env"], **node["env"]},
        "nodes": None,
        "timeout_s": None,
        "disk_limit_bytes": None,
        "notify": None,
        "outputs": [],
    }


def failed(status: Mapping[str, Any] | None) -> bool:
    """Whether a node's end fails the attempt (None: it ended without a result)."""
    return status is None or status.get("outcome") != "succeeded"


def first_failure(ends: Sequence[tuple[int, Mapping[str, Any] | None]]) -> int | None:
    """The node that failed first, from the nodes' ends in the order they were seen."""
    return next((index for index, status in ends if failed(status)), None)


def _nodes_text(nodes: Sequence[int]) -> str:
    if len(nodes) == 1:
        return f"node {nodes[0]} was stopped"
    shown = [str(n) for n in nodes]
    return f"nodes {', '.join(shown[:-1])} and {shown[-1]} were stopped"


def failure_words(
    index: int, count: int, status: Mapping[str, Any] | None, stopped: Sequence[int] = ()
) -> str:
    """``node 1 of 2 failed first (exited with code 3); node 0 was stopped``."""
    if status is None:
        how = "its supervisor ended without a result"
    elif status.get("error"):
        how = str(status["error"])
    elif status.get("oom"):
        how = "killed by the kernel's OOM killer"
    elif status.get("outcome") == "disk_full":
        how = str(status.get("detail") or "the disk holding TAU_HOME is full")
    elif status.get("signal"):
        how = f"killed by signal {status['signal']}"
    else:
        how = f"exited with code {status.get('exit_code')}"
    words = f"node {index} of {count} failed first ({how})"
    return f"{words}; {_nodes_text(stopped)}" if stopped else words


def node_end(index: int, status: Mapping[str, Any] | None) -> dict[str, Any]:
    """How one node ended, for status.json's ``nodes``."""
    if status is None:
        return {"node": index, "outcome": "lost", "exit_code": None, "signal": None, "oom": None}
    return {
        "node": index,
        "outcome": status.get("outcome"),
        "exit_code": status.get("exit_code"),
        "signal": status.get("signal"),
        "oom": status.get("oom"),
    }


def combine(
    statuses: Sequence[Mapping[str, Any] | None],
    failed_node: int | None,
    stop: str | None,
    stopped: Sequence[int] = (),
    detail: str | None = None,
) -> tuple[str, dict[str, Any]]:
    """The attempt's outcome and exit fields from its nodes' ends: ``stop`` (one of
    :data:`GROUP_STOPS`) when the group stopped every node, else the first failed node's
    end, else success. Pure."""
    fields: dict[str, Any] = {
        "nodes": [node_end(i, s) for i, s in enumerate(statuses)],
        "failed_node": None,
        "detail": detail,
        "oom": None,
    }
    if stop is not None:
        first = next((s for s in statuses if s is not None), None) or {}
        fields.update(exit_code=first.get("exit_code"), signal=first.get("signal"))
        return stop, fields
    if failed_node is None:
        failed_node = next((i for i, s in enumerate(statuses) if failed(s)), None)
    if failed_node is None:
        return "succeeded", {**fields, "exit_code": 0, "signal": None}
    status = statuses[failed_node]
    words = failure_words(failed_node, len(statuses), status, stopped)
    fields.update(failed_node=failed_node, detail=words)
    if status is None:
        return "lost", {**fields, "exit_code": None, "signal": None, "error": words}
    error = status.get("error")
    fields.update(
        exit_code=status.get("exit_code"),
        signal=status.get("signal"),
        oom=status.get("oom"),
        error=f"node {failed_node}: {error}" if error else None,
    )
    return ("disk_full" if status.get("outcome") == "disk_full" else "failed"), fields


# -- a node's supervisor ---------------------------------------------------------------------
class _NodeDisk(diskguard.DiskGuard):
    """A node's disk watch: the free space only; the reserve file is the group's."""

    def release(self) -> None:
        pass


class NodeSupervisor(supervisor.Supervisor):
    """The supervisor of one node, forked by the group; reports on ``report_fd``."""

    def __init__(
        self, attempt_dir: str, index: int, launch: dict[str, Any], report_fd: int
    ) -> None:
        super().__init__(attempt_dir)
        self.index = index
        self.line_prefix = node_prefix(index)
        self.launch = launch
        self.report_fd = report_fd

    def serve(self) -> int:
        self.disk = _NodeDisk(self.dir, [], None)
        return self._run_workload()

    def write_status(self, status: dict[str, Any]) -> None:
        status["supervisor_pid"] = os.getpid()
        line = (json.dumps(status, sort_keys=True) + "\n").encode()
        try:
            while line:
                line = line[os.write(self.report_fd, line) :]
        except OSError as exc:  # the group is gone: we are about to follow it
            supervisor._log(f"node {self.index}: cannot report to the group: {exc}")

    def output_to(self, log_fd: int, secrets: Any) -> int:
        """Always a pipe: the pump prefixes the node's lines (and masks its secrets)."""
        variants = logmask.secret_variants(secrets)
        masker = logmask.SecretMasker(variants) if variants else None
        r, w = os.pipe()
        lines = NodeLines(self.line_prefix.encode(), masker)
        self.pump = logmask.OutputPump(r, log_fd, lines)
        self._watchers.append(self.pump)
        return w


def _node_main(
    attempt_dir: str,
    index: int,
    launch: dict[str, Any],
    report_fd: int,
    die_with_us: Callable[[], None] | None,
    mask: Any,
) -> NoReturn:
    """The forked child: becomes node ``index``'s supervisor; never returns."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)  # the group's; install_signals makes the node's own
        os.closerange(3, report_fd)
        os.closerange(report_fd + 1, 1 << 16)
        if die_with_us is not None:
            die_with_us()
        problem = proctree.become_subreaper()
        if problem:
            supervisor._log(f"node {index}: {problem}")
        node = NodeSupervisor(attempt_dir, index, launch, report_fd)
        node.install_signals()
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a SIGTERM held back: now ours
        code = node.serve()
    except BaseException:
        import traceback

        supervisor._log(f"node {index} crashed:\n" + traceback.format_exc())
    finally:
        os._exit(code)


# -- the group -------------------------------------------------------------------------------
class _Node:
    """The group's view of one node: its supervisor and what it reported."""

    def __init__(self, index: int, pid: int, fd: int) -> None:
        self.index = index
        self.pid = pid  # the node supervisor's
        self.fd = fd
        self.buffer = b""
        self.running: dict[str, Any] | None = None
        self.exited: dict[str, Any] | None = None
        self.eof = False
        self.reaped = False
        self.ended = False  # its end is in the group's list of ends

    @property
    def done(self) -> bool:
        return self.eof and self.reaped

    def read(self) -> None:
        """Read what the node supervisor reported (non-blocking)."""
        while not self.eof:
            try:
                chunk = os.read(self.fd, 65536)
            except BlockingIOError:
                return
            if not chunk:
                self.close()
                return
            self.buffer += chunk
            *lines, self.buffer = self.buffer.split(b"\n")
            for line in lines:
                with contextlib.suppress(ValueError):
                    report = json.loads(line)
                    if isinstance(report, dict) and report.get("phase") == "running":
                        self.running = report
                    elif isinstance(report, dict) and report.get("phase") == "exited":
                        self.exited = report

    def close(self) -> None:
        if not self.eof:
            self.eof = True
            os.close(self.fd)


class NodeGroup:
    """Runs launch.json's ``nodes`` for the attempt's supervisor ``sup``."""

    def __init__(self, sup: supervisor.Supervisor) -> None:
        self.sup = sup
        self.nodes: list[_Node] = []
        self.ends: list[tuple[int, dict[str, Any] | None]] = []  # in the order seen
        self.failed: int | None = None
        self.stopped: list[int] = []  # nodes stopped because of another's failure
        self.running_written = False

    def run(self) -> dict[str, Any]:
        sup, launch = self.sup, self.sup.launch
        assert sup.disk is not None
        # Each node has a sandbox of its own; this one copies the outputs at the end (as
        # the workload, in its view: see sandboxrun).
        sup.sandbox = sandboxrun.Sandbox.from_launch(launch)
        grace_s = launch.get("stop_grace_s")
        grace = supervisor.DEFAULT_STOP_GRACE_S if grace_s is None else float(grace_s)
        timeout_s = launch.get("timeout_s")
        sup._started_mono = time.monotonic()
        deadline = None if timeout_s is None else sup._started_mono + float(timeout_s)
        for index, node in enumerate(launch["nodes"]):
            if sup.cancel_requested():
                break
            self.nodes.append(self._fork(index, node_launch(launch, node)))
        stop: str | None = None  # one of GROUP_STOPS, or "failed" (a node failed)
        detail: str | None = None
        kill_at: float | None = None
        if len(self.nodes) < len(launch["nodes"]):  # cancelled while they were starting
            stop = "cancelled"
            self._stop(stop)
            kill_at = time.monotonic() + grace + KILL_MARGIN_S
        while not all(n.done for n in self.nodes):
            now = time.monotonic()
            over_limit = sup.disk.tick(now)
            if stop is None:
                due = sup.stop_due(now, deadline, over_limit)
                if due is not None:
                    stop, detail = due
                else:
                    self.failed = first_failure(self.ends)
                    if self.failed is not None:
                        stop = "failed"
                if stop is not None:
                    self._stop(stop)
                    kill_at = now + grace + KILL_MARGIN_S
            if kill_at is not None and now >= kill_at:
                supervisor._log("node supervisors outlived the grace: SIGKILL")
                self._signal_all(signal.SIGKILL)
                kill_at = None
            next_events = (kill_at, deadline if stop is None else None)
            wake = [t - now for t in next_events if t is not None]
            self._sleep(max(0.0, min([1.0, *wake])))
            self._reap()
            if stop is None:
                self._note_running()
        finished_at = time.time()
        self.clean_up()
        if stop is None:  # every node ended before a pass looked at the ends
            self.failed = first_failure(self.ends)
        return self._exited(None if stop == "failed" else stop, detail, finished_at)

    def _fork(self, index: int, launch: dict[str, Any]) -> _Node:
        r, w = os.pipe()
        die_with_us = proctree.die_with_us()
        # SIGTERM waits until the child has its own handler (else a stop could be lost).
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
        try:
            pid = os.fork()
        except BaseException:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            os.close(r)
            os.close(w)
            raise
        if pid == 0:
            _node_main(self.sup.dir, index, launch, w, die_with_us, mask)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        os.close(w)
        os.set_blocking(r, False)
        return _Node(index, pid, r)

    def _sleep(self, timeout: float) -> None:
        wake = self.sup._wake_r
        by_fd = {n.fd: n for n in self.nodes if not n.eof}
        ready, _, _ = select.select([wake, *by_fd], [], [], timeout)
        for fd in ready:
            if fd in by_fd:
                by_fd[fd].read()
                self._note_end(by_fd[fd])
        try:
            while os.read(wake, 512):
                pass
        except BlockingIOError:
            pass

    def _note_end(self, node: _Node) -> None:
        if not node.ended and (node.exited is not None or node.done):
            node.ended = True
            self.ends.append((node.index, node.exited))

    def _reap(self) -> None:
        for node in self.nodes:
            if node.reaped:
                continue
            try:
                pid, _ = os.waitpid(node.pid, os.WNOHANG)
            except ChildProcessError:
                pid = node.pid
            if pid == node.pid:
                node.reaped = True
                node.read()  # what it wrote before it exited
                node.close()  # nobody else holds the write end
                self._note_end(node)

    def _stop(self, stop: str) -> None:
        for node in self.nodes:
            if not node.reaped and node.exited is None:
                supervisor._log(f"stopping node {node.index} ({stop}): SIGTERM to its supervisor")
                with contextlib.suppress(ProcessLookupError):
                    os.kill(node.pid, signal.SIGTERM)
                if stop == "failed":
                    self.stopped.append(node.index)

    def _signal_all(self, sig: int) -> None:
        for node in self.nodes:
            if not node.reaped:  # not reaped: the pid is still the node supervisor's
                with contextlib.suppress(ProcessLookupError):
                    os.kill(node.pid, sig)

    def _note_running(self) -> None:
        if self.running_written or not self.nodes:
            return
        if len(self.nodes) < len(self.sup.launch["nodes"]):
            return
        if any(n.running is None for n in self.nodes):
            return
        self.running_written = True
        self._take_ids()
        self.sup.write_status(
            {
                "phase": "running",
                "pid": self.sup.pid,
                "pgid": self.sup.pgid,
                "started_at": self.sup.started_at,
                "nodes": [
                    {"node": n.index, "pid": n.running["pid"], "pgid": n.running["pgid"]}
                    for n in self.nodes
                    if n.running is not None
                ],
            }
        )

    def _take_ids(self) -> None:
        """The attempt's pid and group are node 0's; it started when its first node did."""
        first: dict[str, Any] = {}
        if self.nodes:
            first = self.nodes[0].running or self.nodes[0].exited or {}
        self.sup.pid, self.sup.pgid = first.get("pid"), first.get("pgid")
        starts = [
            n.running["started_at"]
            for n in self.nodes
            if n.running is not None and isinstance(n.running.get("started_at"), int | float)
        ]
        self.sup.started_at = min(starts) if starts else None

    def clean_up(self) -> None:
        """Every node supervisor is gone: SIGKILL what is left below us, and reap it."""
        self._signal_all(signal.SIGKILL)
        deadline = time.monotonic() + LEFTOVER_WAIT_S
        while True:
            left = [pid for pid, _, state in proctree.descendants() if state not in "ZX"]
            for pid in left:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                while os.waitpid(-1, os.WNOHANG)[0] > 0:
                    pass
            if not left or time.monotonic() > deadline:
                return
            time.sleep(supervisor._POLL_S)

    def _exited(self, stop: str | None, detail: str | None, finished_at: float) -> dict[str, Any]:
        sup = self.sup
        assert sup.disk is not None
        self._take_ids()
        statuses = [n.exited for n in self.nodes]
        outcome, fields = combine(statuses, self.failed, stop, self.stopped, detail)
        if fields["failed_node"] is not None:
            sup.append_output(fields["detail"])
        if outcome == "disk_full":
            sup.disk.release()  # room for the last lines and the status
            missing = list(sup.launch.get("outputs") or [])
            if missing:
                sup.append_output("outputs not copied: the disk is full")
        else:
            missing = sup.copy_outputs()
        return sup.exited_status(
            outcome,
            finished_at=finished_at,
            missing_outputs=missing,
            disk_used_bytes=sup.disk.used,
            disk_limit_bytes=sup.disk.limit,
            **fields,
        )


def run_group(sup: supervisor.Supervisor) -> int:
    """Run the attempt's nodes and record how the attempt ended (``sup.launch["nodes"]``)."""
    group = NodeGroup(sup)
    try:
        status = group.run()
    except BaseException as exc:
        # Never leave a node without an owner: stop them all, then record the failure.
        group.clean_up()
        sup.write_status(sup.exited_status("failed", error=f"supervisor error: {exc!r}"))
        raise
    sup.write_status(status)
    return 0
