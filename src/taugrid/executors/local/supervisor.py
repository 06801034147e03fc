"""The per-attempt supervisor: ``python -m taugrid.executors.local.supervisor ATTEMPT_DIR``.

It owns one workload process group for its whole life and records the result in files, so
a run survives the server being killed. Contract (all inside ATTEMPT_DIR):

- in: ``launch.json``; optional ``cancel`` (a cancel that may arrive before the SIGTERM
  handler exists, see ``process.request_cancel``);
- secrets: launch.json may hold ``secret_files``, ``{ENV_NAME: absolute path}``. Each
  file is read when the workload starts and its content becomes ``ENV_NAME`` in the
  workload's environment only: values are never written to launch.json, status.json,
  supervisor.log or output.log, nor sent to the server. A file that cannot be read fails
  the attempt like a command that cannot start (exit 127), naming the variable and path;
- out: ``supervisor.pid`` (created exclusively once signal handlers are installed),
  ``status.json`` (phase "running", then "exited"), ``output.log`` (the workload's
  stdout and stderr interleaved; with secrets, through a pipe that masks their values,
  ``logmask``), ``supervisor.log`` (this process's own diagnostics);
- faults: the workload's main process gets SIGKILL when the supervisor dies
  (``proctree.die_with_us``); ``oom`` in status.json says whether the kernel's OOM
  killer ended it (``oomwatch``); ``diskguard`` stops a run over its disk limit
  (``disk_limit_bytes``, outcome ``disk_limit``) and reports a failure on a full disk
  as ``disk_full``, keeping a small reserve file so the last status can be written;
- sandbox: with ``sandbox`` in launch.json the workload runs in bubblewrap as that
  description says (``sandbox.bwrap_argv``); ``sandboxrun`` keeps the stop, exit status
  and output semantics above exactly what they are without one. Files made here are 0600;
- nodes: with ``nodes`` in launch.json (``nodes: N`` in local mode) the supervisor runs
  one node supervisor per node, each all of the above for its node's process tree, and
  the attempt as one unit: see ``nodegroup``.

Start-up time is on the submit-to-running path, so this module and the ones it imports
(``proctree``, ``launchfile``) use only cheap stdlib modules up front (http.client,
shlex, shutil are imported when needed), never the rest of ``taugrid`` (an import-linter
contract keeps it so). That is why ``_write_json_atomic`` repeats
``files.write_json_atomic``, and why ``process.start_supervisor`` can run this file
directly with ``python -I -S``: it then puts its own package root on ``sys.path``.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from typing import Any

if not __package__:  # run as a file (python -I -S .../supervisor.py): find our own package
    sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), *[".."] * 3)))
if __name__ == "__main__":  # nodegroup imports this module by its name: this one, not a copy
    sys.modules.setdefault("taugrid.executors.local.supervisor", sys.modules[__name__])

from taugrid.executors.local import (
    diskguard,
    forkserver,
    launchfile,
    logmask,
    oomwatch,
    proctree,
    sandboxrun,
    statuspush,
)
from taugrid.fsdurable import fsync_dir

LAUNCH_FILE = "launch.json"
STATUS_FILE = "status.json"
PID_FILE = "supervisor.pid"
CANCEL_FILE = "cancel"
OUTPUT_LOG = "output.log"
SUPERVISOR_LOG = "supervisor.log"

START_FAILED_EXIT_CODE = 127  # what a shell reports for a command it cannot run
NOTIFY_TIMEOUT_S = 2.0
DEFAULT_STOP_GRACE_S = 10.0
# Grace for processes the workload left behind after its main process exited on its own.
STRAY_GRACE_S = 1.0
_POLL_S = 0.02


def _log(message: str) -> None:
    # os.write on fd 2 works even when sys.stderr is None (started with fds closed).
    line = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} supervisor[{os.getpid()}] {message}\n"
    with contextlib.suppress(OSError):
        os.write(2, line.encode("utf-8", "replace"))


def _write_json_atomic(path: str, data: object, *, durable: bool = True) -> None:
    # Copy of files.write_json_atomic (see the module docstring for why it is not imported).
    # ``durable=False``: renamed into place (readers see all or nothing) but not fsynced,
    # for what only matters while this process lives (see Supervisor.write_status).
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, sort_keys=True)
        f.write("\n")
        if durable:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if durable:
        fsync_dir(os.path.dirname(path))


def _redirect(fd: int, targets: tuple[int, ...]) -> None:
    for target in targets:
        if fd != target:
            os.dup2(fd, target)
    if fd not in targets:
        os.close(fd)


def _detach(attempt_dir: str) -> None:
    """Cut every tie to the process that started us, so its death cannot reach us."""
    os.closerange(3, 1 << 16)  # inherited fds would keep the parent's pipes/sockets open
    if os.getsid(0) != os.getpid():
        # No controlling terminal, no shared process group. PermissionError: already a
        # group leader (started with process_group=0); carry on in that group.
        with contextlib.suppress(PermissionError):
            os.setsid()
    _redirect(os.open(os.devnull, os.O_RDONLY), (0,))
    log = os.open(
        os.path.join(attempt_dir, SUPERVISOR_LOG), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600
    )
    _redirect(log, (1, 2))


class Supervisor:
    # Before each line the supervisor writes into output.log ("[node 1] " for a node's).
    line_prefix = ""

    def __init__(self, attempt_dir: str) -> None:
        self.dir = attempt_dir
        self.launch: dict[str, Any] = {}
        self.cancel_signalled = False
        self.pid: int | None = None
        self.pgid: int | None = None
        self.started_at: float | None = None
        self._started_mono = 0.0
        self._wake_r = -1
        # Woken by select() besides signals: the output pump, the kernel log (OOM kills).
        self._watchers: list[logmask.OutputPump | oomwatch.OomWatch] = []
        self.pump: logmask.OutputPump | None = None
        self.oom: oomwatch.OomWatch | None = None
        self.disk: diskguard.DiskGuard | None = None
        self.sandbox: sandboxrun.Sandbox | None = None  # launch.json "sandbox" (bwrap)

    # -- files -----------------------------------------------------------------------

    def path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def cancel_requested(self) -> bool:
        return self.cancel_signalled or os.path.exists(self.path(CANCEL_FILE))

    def append_output(self, message: str) -> None:
        def append() -> None:
            with open(self.path(OUTPUT_LOG), "a", encoding="utf-8") as f:
                f.write(f"{self.line_prefix}taugrid: {message}\n")

        try:
            self._on_full_disk(append)
        except OSError as exc:
            _log(f"cannot write to {OUTPUT_LOG}: {exc}")

    def write_status(self, status: dict[str, Any]) -> None:
        """Record ``status`` and push it to the server. Only the final ("exited") status
        is fsynced: it is the run's result, which must outlive a power loss until the
        server has recorded it. "running" matters only while this process lives (after a
        machine crash the attempt is lost either way), and each fsync queues behind every
        other writer on the disk: with many short runs starting together they added up."""
        status["supervisor_pid"] = os.getpid()
        durable = status.get("phase") != "running"
        self._on_full_disk(
            lambda: _write_json_atomic(self.path(STATUS_FILE), status, durable=durable)
        )
        self.notify(status)

    def _on_full_disk(self, write: Any) -> None:
        """Write; on a full disk, give up the reserve and try once more."""
        try:
            write()
        except OSError as exc:
            if exc.errno not in diskguard.DISK_ERRNOS or self.disk is None:
                raise
            self.disk.release()
            write()

    def notify(self, status: dict[str, Any]) -> None:
        """POST the status to the server; best effort (the server also polls the files)."""
        notify = self.launch.get("notify")
        if not isinstance(notify, dict):
            return
        try:
            with open(notify["token_file"], encoding="utf-8") as f:
                token = f.read().strip()
            payload = {"attempt_dir": self.dir, "status": status}
            statuspush.post_json(str(notify["url"]), token, payload, NOTIFY_TIMEOUT_S)
        except Exception as exc:  # any failure is fine: the server polls status.json
            _log(f"notify failed: {exc!r}")

    # -- life cycle ------------------------------------------------------------------

    def install_signals(self) -> None:
        def on_term(signum: int, frame: object) -> None:
            self.cancel_signalled = True

        def ignore(signum: int, frame: object) -> None:
            pass

        # A Python-level no-op handler rather than SIG_IGN: handled signals revert to the
        # default at exec, ignored ones would stay ignored in the workload.
        signal.signal(signal.SIGTERM, on_term)
        signal.signal(signal.SIGHUP, ignore)
        signal.signal(signal.SIGINT, ignore)
        signal.signal(signal.SIGCHLD, ignore)
        # The wakeup fd turns any of these signals (child exit, cancel) into a readable
        # pipe, so the main loop can sleep in select() without polling.
        r, w = os.pipe()
        os.set_blocking(r, False)
        os.set_blocking(w, False)
        signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        self._wake_r = r

    def claim_pid_file(self) -> bool:
        """Write supervisor.pid, failing if another supervisor already owns this attempt.

        Not fsynced: a pid means something only while this process lives, which a power
        loss ends too; the claim's exclusiveness is the link's, not the disk's."""
        final = self.path(PID_FILE)
        tmp = f"{final}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="ascii") as f:
            f.write(f"{os.getpid()}\n")
        try:
            os.link(tmp, final)  # atomic, and fails if the file exists
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)
        return True

    def exited_status(self, outcome: str, **fields: Any) -> dict[str, Any]:
        status: dict[str, Any] = {
            "phase": "exited",
            "pid": self.pid,
            "pgid": self.pgid,
            "started_at": self.started_at,
            "finished_at": time.time(),
            "exit_code": None,
            "signal": None,
            "outcome": outcome,
            "missing_outputs": [],
        }
        if outcome == "cancelled":
            status["stop_reason"] = self.stop_reason()
        status.update(fields)
        return status

    def stop_reason(self) -> str | None:
        """Why the server stopped the workload, as it wrote it in the cancel file (the
        engine's StopReason: cancel, preempt, hardware, ...); reported back in the final
        status so the reason travels with the exit. None from an older server."""
        try:
            with open(self.path(CANCEL_FILE), encoding="utf-8") as f:
                reason = json.load(f).get("reason")
        except (OSError, ValueError, AttributeError):
            return None
        return reason if isinstance(reason, str) else None

    def run(self) -> int:
        self.install_signals()
        if not self.claim_pid_file():
            _log("another supervisor owns this attempt; exiting without touching it")
            return 1
        try:
            with open(self.path(LAUNCH_FILE), encoding="utf-8") as f:
                launch = json.load(f)
            problem = launchfile.check_launch(launch)
        except (OSError, ValueError) as exc:
            launch, problem = {}, f"cannot read {LAUNCH_FILE}: {exc}"
        if problem is not None:
            self.launch = launch if isinstance(launch, dict) else {}
            self.append_output(problem)
            self.write_status(self.exited_status("failed", error=problem))
            return 1
        self.launch = launch
        if self.cancel_requested():
            self.write_status(self.exited_status("cancelled"))
            return 0
        self.disk = diskguard.DiskGuard(self.dir, self.disk_roots(), launch.get("disk_limit_bytes"))
        problem = self.disk.make_reserve()
        if problem:
            _log(problem)
        try:
            return self._run_workload()
        finally:
            self.disk.release()  # its job is done; 256 KiB per attempt must not pile up

    def disk_roots(self) -> list[str]:
        """What a run's disk limit covers: its directory (runs/<id>: workdir, outputs,
        checkpoints, every attempt's logs) and wherever its workdir, outputs or
        checkpoints are."""
        launch = self.launch
        env = launch.get("env") or {}
        roots = [self.dir, launch["cwd"], launch.get("output_dir") or ""]
        roots.append(env.get("TAU_CHECKPOINT_DIR", ""))
        attempts = os.path.dirname(self.dir)
        if os.path.basename(attempts) == "attempts":  # runs/<id>/attempts/<k>
            roots.append(os.path.dirname(attempts))
        return roots

    def _run_workload(self) -> int:
        if self.launch.get("nodes"):  # several nodes, each a process tree of its own
            from taugrid.executors.local import nodegroup

            return nodegroup.run_group(self)
        proc = self.start()
        if proc is None:
            return 0
        try:
            exit_info = self.wait(proc)
        except BaseException as exc:
            # Never leave a workload without an owner: stop it, then record the failure.
            if proc.returncode is None:  # not reaped yet, so its group id is still ours
                proctree.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            self.write_status(self.exited_status("failed", error=f"supervisor error: {exc!r}"))
            raise
        self.write_status(exit_info)
        return 0

    def start(self) -> subprocess.Popen[bytes] | None:
        launch = self.launch
        cwd = launch["cwd"]
        output_dir = launch.get("output_dir")
        if isinstance(output_dir, str) and output_dir:
            try:
                os.makedirs(output_dir, exist_ok=True)
            except OSError as exc:
                _log(f"cannot create output_dir: {exc}")
        argv = launchfile.workload_argv(launch["command"], launch.get("setup"))
        log_fd = os.open(self.path(OUTPUT_LOG), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            if not os.path.isdir(cwd):
                raise FileNotFoundError(f"working directory {cwd} does not exist")
            # The values go into the workload's environment and, when there are any, into
            # the masker of its output; nothing else keeps them.
            secrets = launchfile.read_secrets(launch.get("secret_files"))
            out_fd = self.output_to(log_fd, secrets.values())
            self.sandbox = sandboxrun.Sandbox.from_launch(launch)
            argv, pass_fds = self.sandbox.wrap(argv) if self.sandbox else (argv, ())
            try:
                proc = subprocess.Popen(
                    argv,
                    pass_fds=pass_fds,
                    cwd=cwd,
                    env={**launch["env"], **secrets},
                    stdin=subprocess.DEVNULL,
                    stdout=out_fd,
                    stderr=out_fd,
                    start_new_session=True,  # own process group: one signal reaches it all
                    close_fds=True,
                    preexec_fn=proctree.die_with_us(),
                )
            finally:
                if out_fd != log_fd:
                    os.close(out_fd)  # the workload holds the write end now
        except OSError as exc:
            error = f"cannot start the workload: {exc}"
            with contextlib.suppress(OSError):
                line = f"{self.line_prefix}taugrid: {error}\n"
                os.write(log_fd, line.encode("utf-8", "replace"))
            if self.pump is not None:
                self.pump.finish()  # closes log_fd too
            else:
                os.close(log_fd)
            missing = self.copy_outputs()
            self.write_status(
                self.exited_status(
                    "failed",
                    exit_code=START_FAILED_EXIT_CODE,
                    error=error,
                    missing_outputs=missing,
                )
            )
            return None
        if self.pump is None:
            os.close(log_fd)  # the workload writes to the file itself
        self.pid = proc.pid
        self.oom = oomwatch.OomWatch(proc.pid, self.is_ours)
        if self.oom.selectable:
            self._watchers.append(self.oom)
        self.started_at = time.time()
        self._started_mono = time.monotonic()
        try:
            self.pgid = os.getpgid(proc.pid)
        except OSError:
            self.pgid = proc.pid
        if self.sandbox is not None:  # the sandbox's own group, not bwrap's
            self.pgid = self.sandbox.started(proc.pid)
        self.write_status(
            {
                "phase": "running",
                "pid": self.pid,
                "pgid": self.pgid,
                "started_at": self.started_at,
            }
        )
        return proc

    def output_to(self, log_fd: int, secrets: Any) -> int:
        """Where the workload's stdout and stderr go: the log itself, or with secrets to
        mask the write end of a pipe that ``self.pump`` copies into the log."""
        variants = logmask.secret_variants(secrets)
        if not variants:
            return log_fd
        r, w = os.pipe()
        self.pump = logmask.OutputPump(r, log_fd, logmask.SecretMasker(variants))
        self._watchers.append(self.pump)
        return w

    # -- sandbox hooks (sandboxrun: what bwrap changes about signals, status, outputs) ----

    def terminate(self, pgid: int) -> None:
        """SIGTERM to the workload: its group and every process below us (but bwrap)."""
        if self.sandbox is not None:
            self.sandbox.terminate(pgid)
        else:
            proctree.kill_tree(pgid, signal.SIGTERM)

    def workload_returncode(self, returncode: int) -> int:
        """The workload's own return code (bwrap's is in the shell's encoding)."""
        if self.sandbox is None:
            return returncode
        code, failed = self.sandbox.returncode(returncode)
        if failed:
            self.append_output(failed)
            return START_FAILED_EXIT_CODE
        return code

    def is_ours(self, pid: int) -> bool:
        """Whether ``pid`` belongs to the workload (for the OOM watch)."""
        return proctree.is_descendant(pid, os.getpid(), self.pgid)

    def _sleep(self, timeout: float | None) -> None:
        watchers = [w for w in self._watchers if not getattr(w, "eof", False)]
        ready, _, _ = select.select([self._wake_r, *watchers], [], [], timeout)
        for w in ready:
            if not isinstance(w, int):
                w.on_ready()
        try:
            while os.read(self._wake_r, 512):
                pass
        except BlockingIOError:
            pass

    def stop_due(
        self, now: float, deadline: float | None, over_limit: str | None
    ) -> tuple[str, str | None] | None:
        """Whether the attempt must stop now, and why: a cancel, its timeout, or its disk
        limit (``over_limit``, the disk guard's words, which go into its log too)."""
        if self.cancel_requested():
            return "cancelled", None
        if deadline is not None and now >= deadline:
            return "timeout", None
        if over_limit is not None:
            self.append_output(over_limit)
            return "disk_limit", over_limit
        return None

    def wait(self, proc: subprocess.Popen[bytes]) -> dict[str, Any]:
        """Wait for the workload, stopping it on cancel or timeout; the exited status."""
        assert self.pgid is not None
        pgid = self.pgid
        grace_s = self.launch.get("stop_grace_s")
        grace = DEFAULT_STOP_GRACE_S if grace_s is None else float(grace_s)
        timeout_s = self.launch.get("timeout_s")
        # From the start, not from here: the "running" notify may have taken a while.
        deadline = None if timeout_s is None else self._started_mono + float(timeout_s)
        reason: str | None = None  # "cancelled" | "timeout" | "disk_limit" once stopping
        kill_at: float | None = None
        detail: str | None = None
        assert self.disk is not None
        while True:
            # WNOWAIT: see the exit without reaping, so the pid (= pgid) stays reserved
            # and signalling the group below cannot hit a recycled process group.
            if os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT):
                break
            now = time.monotonic()
            over_limit = self.disk.tick(now)
            if reason is None:
                due = self.stop_due(now, deadline, over_limit)
                if due is not None:
                    reason, detail = due
                    _log(f"stopping the workload ({reason}): SIGTERM to group {pgid}")
                    self.terminate(pgid)
                    kill_at = now + grace
            if kill_at is not None and now >= kill_at:
                _log(f"grace over: SIGKILL to group {pgid} and every process below")
                proctree.kill_tree(pgid, signal.SIGKILL)
                kill_at = None  # sent; the exit will wake us
            next_events = (kill_at, deadline if reason is None else None)
            wake = [t - now for t in next_events if t is not None]
            self._sleep(max(0.0, min([1.0, *wake])))
        finished_at = time.time()
        # The main process is gone; nothing else of this run may outlive it, whether in
        # its process group or in a session of its own (adopted by us, the subreaper).
        if reason is None:
            if proctree.tree_alive(pgid, proc.pid):
                self.terminate(pgid)
            kill_at = time.monotonic() + min(grace, STRAY_GRACE_S)
        elif kill_at is None:
            kill_at = time.monotonic()
        while time.monotonic() < kill_at and proctree.tree_alive(pgid, proc.pid):
            proctree.reap_orphans(proc.pid)
            if self.pump is not None:
                self.pump.pump()  # stray writers must not block on a full pipe meanwhile
            time.sleep(_POLL_S)
        proctree.kill_tree(pgid, signal.SIGKILL)
        proctree.reap_orphans(proc.pid)
        returncode = self.workload_returncode(proc.wait())  # reap last: frees the pid
        return self.exit_status(reason, returncode, finished_at, detail)

    def exit_status(
        self, reason: str | None, returncode: int, finished_at: float, detail: str | None
    ) -> dict[str, Any]:
        """The exited status of a workload that is gone: outcome, OOM, disk, outputs."""
        assert self.disk is not None and self.oom is not None
        if self.pump is not None:
            self.pump.finish()
        sig = -returncode if returncode < 0 else None
        exit_code = 128 + sig if sig is not None else returncode
        oom = None
        full = None
        if reason is None and returncode != 0:
            oom = self.oom.verdict(killed_by_sigkill=exit_code == 128 + signal.SIGKILL)
            full = None if oom else self.disk.full()
        self.oom.close()
        if reason is None:
            reason = "succeeded" if returncode == 0 else "disk_full" if full else "failed"
        if full:
            detail = full
            self.disk.release()  # room for the last log line and the status
            self.append_output(full)
        if self.pump is not None and self.pump.lost_bytes:
            self.append_output(f"{self.pump.lost_bytes} bytes of output lost: the disk was full")
        if full:
            missing = list(self.launch.get("outputs") or [])
            if missing:
                self.append_output("outputs not copied: the disk is full")
        else:
            missing = self.copy_outputs()
        return self.exited_status(
            reason,
            exit_code=exit_code,
            signal=sig,
            finished_at=finished_at,
            missing_outputs=missing,
            oom=oom,
            detail=detail,
            disk_used_bytes=self.disk.used,
            disk_limit_bytes=self.disk.limit,
        )

    def copy_outputs(self) -> list[str]:
        """Copy ``outputs`` from cwd into output_dir; the ones that could not be copied."""
        if self.sandbox is not None:  # as the workload, in its sandbox: see sandboxrun
            log_fd = os.open(self.path(OUTPUT_LOG), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                return self.sandbox.copy_outputs(self.launch, log_fd, self.append_output)
            finally:
                os.close(log_fd)
        outputs = self.launch.get("outputs") or []
        output_dir = self.launch.get("output_dir")
        if not outputs or not isinstance(output_dir, str):
            return list(outputs)
        import shutil

        cwd = os.path.realpath(self.launch["cwd"])
        missing: list[str] = []
        for rel in outputs:
            src = os.path.normpath(os.path.join(cwd, str(rel)))
            inside = src == cwd or src.startswith(cwd + os.sep)
            if not inside or not os.path.lexists(src):
                missing.append(rel)
                continue
            dst = os.path.join(output_dir, os.path.relpath(src, cwd))
            try:
                if os.path.realpath(src) == os.path.realpath(dst):
                    continue  # already where it belongs (output_dir inside cwd)
                os.makedirs(os.path.dirname(dst) or ".", exist_ok=True)
                if os.path.isdir(src) and not os.path.islink(src):
                    shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True)
                else:
                    shutil.copy2(src, dst, follow_symlinks=False)
            except OSError as exc:
                _log(f"cannot copy output {rel}: {exc}")
                self.append_output(f"cannot copy output {rel}: {exc}")
                missing.append(rel)
        return missing


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[1] == forkserver.FLAG:
        return forkserver.serve(_supervise, _warm_up)
    if len(argv) != 2:
        sys.stderr.write("usage: python -m taugrid.executors.local.supervisor ATTEMPT_DIR\n")
        return 2
    return _supervise(os.path.abspath(argv[1]))


def _warm_up() -> None:
    """What a fork server loads once so that no forked supervisor loads it again: libc
    for prctl (ctypes) and the modules imported on demand."""
    import shutil  # noqa: F401  (copy_outputs)
    import traceback  # noqa: F401  (main)

    from taugrid.executors.local import nodegroup  # noqa: F401  (nodes > 1)

    proctree.die_with_us()


def _supervise(attempt_dir: str) -> int:
    _detach(attempt_dir)
    problem = proctree.become_subreaper()
    if problem:
        _log(problem)
    try:
        return Supervisor(attempt_dir).run()
    except BaseException:
        import traceback

        _log("crashed:\n" + traceback.format_exc())
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
