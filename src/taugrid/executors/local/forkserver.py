"""A supervisor fork server: supervisors forked from one warm interpreter. Stdlib only.

Starting a supervisor as a new ``python -I -S supervisor.py`` costs an interpreter and the
supervisor's imports, ~45 ms of CPU per run: with many short runs that, not the workload
or the server, bounds the runs per second a 2-core machine can execute. The server
therefore starts one ``supervisor.py --fork-server .`` (``process.start_supervisor``)
and asks it, over its stdin, for each supervisor; it forks one per request, a copy of an
interpreter that has everything imported, and answers with its pid on stdout.

Protocol: one JSON line per request, the absolute attempt directory; one JSON line per
answer, ``{"pid": N}`` or ``{"error": "..."}``, in order.

What the forked supervisor is: the same code as a fresh one, run as ``main`` would run it
(detached in a session of its own, every inherited descriptor closed, signal handlers its
own). It first makes the attempt directory its working directory: its command line is
the fork server's, ending in ``.``, so ``process.is_supervisor_of`` (which resolves a
supervisor's last argument against its working directory) finds it names its attempt,
exactly as it does for a supervisor started with the attempt's path.

The fork server holds no run's state: it lives as long as the server's end of its stdin
is open and exits at end of file (the server stopped or died). The supervisors it forked
are detached and carry on; their exit statuses are collected here while it lives, by
init after.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence

FLAG = "--fork-server"
REAP_EVERY_S = 0.5
# The first answer waits for the fork server's own start-up; a fork takes milliseconds.
ANSWER_TIMEOUT_S = 10.0
# After a failure the server starts supervisors the plain way for a while.
RETRY_AFTER_S = 60.0


def serve(run_one: Callable[[str], int], warm_up: Callable[[], object] | None = None) -> int:
    """Serve requests on stdin until end of file; ``run_one(attempt_dir)`` in each child."""
    os.chdir("/")  # never inside an attempt directory (see the module docstring)
    if warm_up is not None:
        warm_up()  # imports the children would otherwise each do again
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, _noop)  # an exit wakes select() to reap at once
    pending = b""
    while True:
        _reap()
        ready, _, _ = select.select([0, wake_r], [], [], REAP_EVERY_S)
        if wake_r in ready:
            _drain(wake_r)
        if 0 not in ready:
            continue
        data = os.read(0, 65536)
        if not data:
            return 0  # the server is gone
        pending += data
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            _write_all(1, _spawn(line, run_one, (wake_r, wake_w)))


def _spawn(line: bytes, run_one: Callable[[str], int], fds: tuple[int, int]) -> bytes:
    try:
        attempt_dir = json.loads(line)
    except ValueError:
        attempt_dir = None
    if not isinstance(attempt_dir, str) or not os.path.isabs(attempt_dir):
        return b'{"error": "a request is an absolute attempt directory"}\n'
    try:
        pid = os.fork()
    except OSError as exc:
        return json.dumps({"error": f"fork: {exc}"}).encode() + b"\n"
    if pid == 0:  # the supervisor
        code = 1
        try:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            for fd in fds:
                os.close(fd)
            os.chdir(attempt_dir)
            code = run_one(attempt_dir)
        finally:
            os._exit(code)  # never back into the fork server's loop
    return json.dumps({"pid": pid}).encode() + b"\n"


def _reap() -> None:
    """Collect every child that has exited (all of them are supervisors)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data) :]


def _noop(signum: int, frame: object) -> None:
    pass


# -- the server's end ----------------------------------------------------------------------
class Unavailable(Exception):
    """The fork server could not fork this supervisor; start it the plain way.
    ``recent``: it failed earlier and is not being tried again yet (nothing new)."""

    def __init__(self, why: str, *, recent: bool = False) -> None:
        super().__init__(why)
        self.recent = recent


class Client:
    """One fork server, started on first use by the process that asks (the server).

    ``argv`` starts it (``python -I -S supervisor.py --fork-server .``). Any failure
    (it exited, answered nonsense or not in time) kills it (only it: the supervisors it
    forked live in sessions of their own) and raises :class:`Unavailable`; for
    ``RETRY_AFTER_S`` after that every call raises at once, then a new one is started.
    """

    def __init__(self, argv: Sequence[str]) -> None:
        self.argv = list(argv)
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._retry_at = 0.0

    def spawn(self, attempt_dir: str) -> int:
        """Fork the supervisor of ``attempt_dir``; its pid once it exists."""
        with self._lock:
            if time.monotonic() < self._retry_at:
                raise Unavailable("the fork server failed recently", recent=True)
            try:
                if self._proc is None or self._proc.poll() is not None:
                    self._discard()
                    self._proc = self._start()
                return self._ask(self._proc, attempt_dir)
            except (OSError, ValueError) as exc:
                self._discard()
                self._retry_at = time.monotonic() + RETRY_AFTER_S
                raise Unavailable(str(exc) or type(exc).__name__) from exc

    def close(self) -> None:
        """End the fork server (end of file on its stdin); what it forked carries on."""
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is None:
            return
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.close()
        try:
            proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()

    def _start(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            self.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            bufsize=0,
            close_fds=True,
            start_new_session=True,  # no signal aimed at the server's group reaches it
            cwd="/",
        )

    def _ask(self, proc: subprocess.Popen[bytes], attempt_dir: str) -> int:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(attempt_dir).encode() + b"\n")
        out = proc.stdout.fileno()
        deadline = time.monotonic() + ANSWER_TIMEOUT_S
        answer = b""
        while not answer.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([out], [], [], left)[0]:
                raise TimeoutError("the fork server did not answer in time")
            piece = os.read(out, 4096)
            if not piece:
                raise OSError("the fork server exited")
            answer += piece
        reply = json.loads(answer)
        pid = reply.get("pid") if isinstance(reply, dict) else None
        if not isinstance(pid, int):
            raise ValueError(str(reply.get("error") if isinstance(reply, dict) else reply))
        return pid

    def _discard(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        proc.kill()
        proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()
