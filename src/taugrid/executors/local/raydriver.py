"""``launcher: ray`` in local mode: a single-node Ray cluster of the attempt's own, and the
run's command submitted to it as a Ray job. Stdlib only.

The executor makes this file the workload's command (:func:`driver_argv`); the supervisor
starts it like any other command, in the workload's process group, its environment and
its working directory (the run's workdir), so output, secrets masking, the sandbox and
the stop semantics are the supervisor's. It runs with the server's interpreter
(``python -I -S``: the standard library only, nothing of the workload's ``PYTHONPATH``)
and drives the ``ray`` CLI of the server's environment (the extra ``taugrid[ray]``):

1. ``ray start --head`` with the run's own ports (free ones, never Ray's fixed 6379/8265/
   10001/52365), its own temp dir ``/tmp/tau-ray-<run id>`` (short: Ray's unix sockets
   live below it and a socket path is at most 107 bytes; removed at the end, and a stale
   one from an attempt that was killed is removed first), ``--disable-usage-stats``, the
   run's CPUs (``resources.cpus`` rounded up, else what Ray detects) and GPUs (the
   placement's: the raylet inherits its ``CUDA_VISIBLE_DEVICES`` and Ray narrows it per
   task). Its own output goes to a file, shown in output.log only when it fails.
2. The job, through Ray's job REST API (what ``ray job submit`` calls): the entrypoint
   is what the cluster's RayJob runs (``manifests.workloads.render_rayjob``: ``setup &&
   command``) after a ``cd`` into the run's workdir; the runtime environment's
   ``env_vars`` carry the workload environment (``TAU_*``, the spec's ``env``, the
   submitter's ``PATH`` ...), so every Ray task and actor of the job sees it, but never a
   secret's value (``--hide-env``: those reach Ray's processes by inheritance only, not
   Ray's job table) nor ``CUDA_VISIBLE_DEVICES`` (Ray's per task). The submission id is
   ``tau-<run id>-<attempt>``.
3. The job's log (``job-driver-<id>.log`` of the session) is copied to stdout, so into
   output.log, as it grows. The end: ``SUCCEEDED`` exits 0; ``FAILED`` prints Ray's
   message and exits with the entrypoint's exit code (1 when Ray has none); ``STOPPED``
   (by Ray's own API) exits 1.
4. Whatever the end, the cluster goes with it: this process is a child subreaper, so every
   Ray process (gcs_server, raylet, dashboard, agents, workers, the entrypoint) stays
   below it; all get SIGTERM, then SIGKILL, and are reaped before the temp dir is removed
   and this process exits. On SIGTERM (a cancel, a timeout: the supervisor signals the
   whole tree at once) the job's entrypoint and its children get the run's
   ``stop_grace`` less a margin to end, with their output still copied; Ray's daemons and
   workers are not waited for. Never ``ray
   stop``: it stops every Ray cluster of the machine.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

if not __package__:  # run as a file (python -I -S .../raydriver.py): find our own package
    sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), *[".."] * 3)))

from taugrid.executors.local import proctree

TMP_ROOT = "/tmp"
TEMP_PREFIX = "tau-ray-"
# Ray puts session_<date>_<time>_<usec>_<pid>/sockets/plasma_store below its temp dir; a
# unix socket's path has at most 107 bytes: the run id is cut to keep room (see temp_dir).
SOCKET_PATH_MAX = 107
RAY_SOCKET_SUFFIX_LEN = len("/session_2026-12-02_13-32-15_385081_4194304/sockets/plasma_store")
RUN_ID_IN_TEMP_MAX = SOCKET_PATH_MAX - RAY_SOCKET_SUFFIX_LEN - len(TMP_ROOT) - len(TEMP_PREFIX) - 1
LOCALHOST = "127.0.0.1"
START_TIMEOUT_S = 180.0  # ray start, then the dashboard's job API (slow on a small machine)
STATUS_EVERY_S = 0.5
STATUS_LOST_AFTER_S = 30.0  # the job API unanswered this long while the job runs: failed
TAIL_EVERY_S = 0.1
STOP_MARGIN_S = 1.0  # of the stop grace, kept to kill and tidy before the supervisor does
DAEMON_GRACE_S = 1.0  # Ray's daemons after SIGTERM (gcs_server takes no notice of it)
STOPPED_EXIT = 128 + signal.SIGTERM
# Ray sets CUDA_VISIBLE_DEVICES per task from the node's; the cluster's token reaches its
# processes by inheritance, never Ray's job table.
HIDDEN_ALWAYS = ("CUDA_VISIBLE_DEVICES", "RAY_AUTH_TOKEN", "RAY_AUTH_MODE")
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")


def _say(message: str) -> None:
    """A line of ours in output.log (stdout), as the supervisor writes its own."""
    with contextlib.suppress(OSError):
        os.write(1, f"taugrid: {message}\n".encode("utf-8", "replace"))


# -- pure parts (the executor builds the argv; tests check each) ---------------------------


@dataclass(frozen=True)
class DriverArgs:
    ray: str  # the ray CLI of the server's environment
    run_id: str
    attempt: int
    gpus: int
    cpus: int | None  # None: what Ray detects
    stop_grace_s: float
    hidden_env: tuple[str, ...]  # names never put into the runtime env (secrets)
    entrypoint: str


def script_path() -> str:
    """This module's file (the .py, never a cached .pyc)."""
    path = os.path.abspath(__file__)
    return path[:-1] if path.endswith(".pyc") else path


def entrypoint_of(command: Sequence[str] | str, setup: str | None) -> str:
    """The job's entrypoint as the cluster's RayJob has it (``render_rayjob``)."""
    entrypoint = command if isinstance(command, str) else shlex.join(command)
    return f"{setup} && {entrypoint}" if setup else entrypoint


def driver_argv(
    python: str,
    *,
    ray: str,
    run_id: str,
    attempt: int,
    gpus: int,
    cpus: int | None,
    stop_grace_s: float,
    hidden_env: Sequence[str],
    command: Sequence[str] | str,
    setup: str | None,
) -> list[str]:
    """The workload command of a ``launcher: ray`` attempt: this driver, under ``python``
    (the server's), told what :func:`parse_argv` reads back."""
    argv = [
        python,
        "-I",
        "-S",
        script_path(),
        "--ray",
        ray,
        "--run-id",
        run_id,
        "--attempt",
        str(attempt),
        "--gpus",
        str(gpus),
        "--stop-grace",
        repr(float(stop_grace_s)),
    ]
    if cpus is not None:
        argv += ["--cpus", str(cpus)]
    for name in sorted(set(hidden_env)):
        argv += ["--hide-env", name]
    return [*argv, "--", entrypoint_of(command, setup)]


_OPTIONS = ("--ray", "--run-id", "--attempt", "--gpus", "--cpus", "--stop-grace", "--hide-env")


def parse_argv(argv: Sequence[str]) -> DriverArgs:
    """What :func:`driver_argv` wrote (``argv`` without the program); ValueError else."""
    values: dict[str, str] = {}
    hidden: list[str] = []
    it = iter(argv)
    for arg in it:
        if arg == "--":
            rest = list(it)
            if len(rest) != 1 or not rest[0].strip():
                raise ValueError("expected one entrypoint after --")
            entrypoint = rest[0]
            break
        if arg not in (
            "--ray",
            "--run-id",
            "--attempt",
            "--gpus",
            "--cpus",
            "--stop-grace",
            "--hide-env",
        ):
            raise ValueError(f"unknown argument {arg!r}")
        value = next(it, None)
        if value is None:
            raise ValueError(f"{arg} needs a value")
        if arg == "--hide-env":
            hidden.append(value)
        else:
            values[arg] = value
    else:
        raise ValueError("expected -- and the entrypoint")
    for needed in ("--ray", "--run-id", "--attempt"):
        if needed not in values:
            raise ValueError(f"{needed} is required")
    return DriverArgs(
        ray=values["--ray"],
        run_id=values["--run-id"],
        attempt=int(values["--attempt"]),
        gpus=int(values.get("--gpus", "0")),
        cpus=int(values["--cpus"]) if "--cpus" in values else None,
        stop_grace_s=float(values.get("--stop-grace", "10")),
        hidden_env=tuple(hidden),
        entrypoint=entrypoint,
    )


def temp_dir(run_id: str, root: str = TMP_ROOT) -> str:
    """The Ray temp dir of a run: ``/tmp/tau-ray-<run id>``, the id cut (with a hash of it,
    so two long ids stay apart) where Ray's socket paths below would be too long."""
    short = run_id
    if len(short) > RUN_ID_IN_TEMP_MAX:
        digest = hashlib.sha256(run_id.encode()).hexdigest()[:6]
        short = f"{run_id[: RUN_ID_IN_TEMP_MAX - 7]}-{digest}"
    return os.path.join(root, TEMP_PREFIX + short)


def remove_stale_temp(run_id: str, ended_at: object) -> bool:
    """Remove the run's Ray temp dir if an attempt that ended at ``ended_at`` left it (its
    driver was killed before it could: a stop grace under a second); never one made
    after that (the next attempt's), nor another user's, nor through a link. The
    executor calls it when it sees an attempt's end. True when it removed one."""
    import shutil
    import stat

    path = temp_dir(run_id)
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        return False
    if not isinstance(ended_at, (int, float)) or st.st_mtime > ended_at:
        return False
    shutil.rmtree(path, ignore_errors=True)
    return True


def submission_id(run_id: str, attempt: int) -> str:
    return f"tau-{run_id}-{attempt}"


@dataclass(frozen=True)
class Ports:
    gcs: int
    dashboard: int
    client_server: int
    dashboard_agent: int


def start_argv(args: DriverArgs, temp: str, ports: Ports) -> list[str]:
    """``ray start --head`` of the run's cluster: its ports, temp dir, CPUs and GPUs."""
    argv = [
        args.ray,
        "start",
        "--head",
        f"--port={ports.gcs}",
        f"--dashboard-host={LOCALHOST}",
        f"--dashboard-port={ports.dashboard}",
        f"--ray-client-server-port={ports.client_server}",
        f"--dashboard-agent-listen-port={ports.dashboard_agent}",
        f"--temp-dir={temp}",
        f"--num-gpus={args.gpus}",
        "--include-dashboard=true",
        "--disable-usage-stats",
        "--log-style=record",
        "--log-color=false",
    ]
    if args.cpus is not None:
        argv.append(f"--num-cpus={args.cpus}")
    return argv


def runtime_env(environ: Mapping[str, str], hidden: Sequence[str]) -> dict[str, Any]:
    """The job's runtime environment: the workload environment as ``env_vars``, but the
    hidden names (secrets) and ``CUDA_VISIBLE_DEVICES`` (Ray's, per task)."""
    leave_out = {*hidden, *HIDDEN_ALWAYS}
    return {"env_vars": {k: v for k, v in sorted(environ.items()) if k not in leave_out}}


def job_request(args: DriverArgs, cwd: str, environ: Mapping[str, str]) -> dict[str, Any]:
    """The body of ``POST /api/jobs/`` (Ray's job REST API, as ``ray job submit`` sends)."""
    return {
        "entrypoint": f"cd {shlex.quote(cwd)} && {args.entrypoint}",
        "submission_id": submission_id(args.run_id, args.attempt),
        "runtime_env": runtime_env(environ, args.hidden_env),
        "metadata": {"tau_run_id": args.run_id, "tau_attempt": str(args.attempt)},
    }


def job_exit(info: Mapping[str, Any]) -> tuple[int, str | None]:
    """The exit code for a finished job's info (``GET /api/jobs/<id>``) and what to say."""
    status = info.get("status")
    if status == "SUCCEEDED":
        return 0, None
    message = info.get("message")
    first = message.strip().splitlines()[0] if isinstance(message, str) and message.strip() else ""
    if status == "STOPPED":
        return 1, "the Ray job was stopped" + (f": {first}" if first else "")
    code = info.get("driver_exit_code")
    exit_code = 1
    if isinstance(code, int) and not isinstance(code, bool) and code != 0:
        exit_code = code if code > 0 else 128 + min(-code, 127)
    return exit_code, f"the Ray job failed: {first or 'Ray gave no reason'}"


# -- the cluster and the job ---------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOCALHOST, 0))
        return int(s.getsockname()[1])


def free_ports() -> Ports:
    """Four distinct free ports (held open together while picked)."""
    socks = []
    try:
        for _ in range(4):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(s)
            s.bind((LOCALHOST, 0))
        gcs, dashboard, client, agent = (int(s.getsockname()[1]) for s in socks)
    finally:
        for s in socks:
            s.close()
    return Ports(gcs, dashboard, client, agent)


def ray_env(environ: Mapping[str, str], token: str) -> dict[str, str]:
    """The environment of ``ray start``, so of every process of the cluster: the
    workload's, with Ray's token authentication on (its GCS listens on every interface:
    without a token anyone who reaches the port could run code as the run) and no usage
    stats."""
    return {
        **environ,
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": token,
        "RAY_USAGE_STATS_ENABLED": "0",
    }


class _Api:
    """Ray's job REST API on the dashboard (loopback, never through a proxy)."""

    def __init__(self, port: int, token: str) -> None:
        import urllib.request

        self.token = token
        self.base = f"http://{LOCALHOST}:{port}"
        self._request = urllib.request.Request
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def call(self, method: str, path: str, body: object = None, timeout: float = 10.0) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = self._request(self.base + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        req.add_header("Authorization", f"Bearer {self.token}")
        with self._opener.open(req, timeout=timeout) as resp:
            return json.loads(resp.read() or b"null")


class Driver:
    def __init__(self, args: DriverArgs) -> None:
        self.args = args
        self.stopping = False
        self.temp = temp_dir(args.run_id)
        self.sid = submission_id(args.run_id, args.attempt)
        self.daemons: set[int] = set()  # Ray's own processes, as ray start left them
        self.token = os.urandom(24).hex()  # the cluster's (Ray's token authentication)
        self.ray_start: subprocess.Popen[bytes] | None = None
        self._log: Any = None  # the job's log, once it exists
        self._log_path = os.path.join(
            self.temp, "session_latest", "logs", f"job-driver-{self.sid}.log"
        )

    # -- signals, processes ----------------------------------------------------------------

    def install_signals(self) -> None:
        def on_stop(signum: int, frame: object) -> None:
            self.stopping = True

        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, on_stop)

    def _sleep(self, seconds: float) -> None:
        """Sleep, reaping adopted orphans, unless a stop arrives."""
        end = time.monotonic() + seconds
        while not self.stopping and time.monotonic() < end:
            self.reap()
            time.sleep(min(TAIL_EVERY_S, max(0.0, end - time.monotonic())))

    def reap(self) -> None:
        if self.ray_start is not None and self.ray_start.poll() is None:
            return  # its exit status is Popen's to collect, not waitpid(-1)'s (and its
            # daemons are its children until it exits)
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass

    def live_below(self) -> list[int]:
        return [pid for pid, _, state in proctree.descendants() if state not in "ZX"]

    def signal_all(self, sig: int) -> None:
        for pid in self.live_below():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)

    def kill_all(self, grace: float) -> None:
        """SIGTERM to every process below this one, ``grace`` to go, SIGKILL, reaped."""
        self.signal_all(signal.SIGTERM)
        end = time.monotonic() + grace
        while self.live_below() and time.monotonic() < end:
            self.tail()
            self.reap()
            time.sleep(0.05)
        for _ in range(100):  # SIGKILL until nothing is left (a fork racing the first)
            if not self.live_below():
                break
            self.signal_all(signal.SIGKILL)
            self.reap()
            time.sleep(0.02)
        self.reap()

    # -- the log -------------------------------------------------------------------------

    def tail(self) -> None:
        """Copy what the job's log gained to stdout (output.log)."""
        if self._log is None:
            try:
                self._log = open(self._log_path, "rb")  # noqa: SIM115 (kept open)
            except OSError:
                return
        while True:
            chunk = self._log.read(1 << 16)
            if not chunk:
                return
            view = memoryview(chunk)
            while view:
                try:
                    view = view[os.write(1, view) :]
                except InterruptedError:
                    continue
                except OSError:
                    return

    # -- the run -------------------------------------------------------------------------

    def run(self) -> int:
        self.install_signals()
        problem = proctree.become_subreaper()
        if problem:
            _say(problem)
        try:
            code = self._run()
        except Exception as exc:  # say it, and still stop everything below
            _say(f"the Ray driver failed: {exc!r}")
            code = 1
        self.finish()
        return code

    def _run(self) -> int:
        self.prepare_temp()
        ports = free_ports()
        started = time.monotonic()
        out_path = os.path.join(self.temp, "ray-start.log")
        with open(out_path, "wb") as out:
            try:
                self.ray_start = subprocess.Popen(
                    start_argv(self.args, self.temp, ports),
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=ray_env(os.environ, self.token),
                )
            except OSError as exc:
                _say(
                    f"cannot start Ray ({self.args.ray}): {exc}; install it in the server's "
                    "environment: pip install 'taugrid[ray]'"
                )
                return 127
        code = self._wait_ray_start(started)
        if code is not None:
            return code
        self.daemons = set(self.live_below())
        api = _Api(ports.dashboard, self.token)
        if not self._submit(api, started):
            return STOPPED_EXIT if self.stopping else 1
        _say(
            f"Ray head started in {time.monotonic() - started:.1f}s (dashboard "
            f"{LOCALHOST}:{ports.dashboard}, GCS port {ports.gcs}, "
            f"{self.args.cpus if self.args.cpus is not None else 'all'} CPUs, "
            f"{self.args.gpus} GPUs); job {self.sid} submitted"
        )
        return self._follow(api)

    def prepare_temp(self) -> None:
        """The run's temp dir, new and private (one left by a killed attempt is removed)."""
        import shutil

        try:
            if os.path.lexists(self.temp):
                if os.path.islink(self.temp) or not os.path.isdir(self.temp):
                    os.unlink(self.temp)
                else:
                    shutil.rmtree(self.temp, ignore_errors=True)
            os.mkdir(self.temp, 0o700)
        except OSError:  # another user's, in a shared /tmp: a name of our own instead
            import tempfile

            self.temp = tempfile.mkdtemp(prefix=TEMP_PREFIX, dir=TMP_ROOT)
            self._log_path = os.path.join(
                self.temp, "session_latest", "logs", f"job-driver-{self.sid}.log"
            )

    def _wait_ray_start(self, started: float) -> int | None:
        """None once ``ray start`` succeeded; else the exit code to end with."""
        assert self.ray_start is not None
        while self.ray_start.poll() is None:
            if self.stopping:
                return STOPPED_EXIT
            if time.monotonic() - started > START_TIMEOUT_S:
                _say(f"ray start did not finish in {START_TIMEOUT_S:.0f}s")
                self._show_ray_start()
                return 1
            time.sleep(0.05)
        if self.ray_start.returncode != 0:
            _say(f"ray start failed (exit code {self.ray_start.returncode}); its output:")
            self._show_ray_start()
            return 1
        return None

    def _show_ray_start(self) -> None:
        try:
            with open(os.path.join(self.temp, "ray-start.log"), "rb") as f:
                data = f.read()[-20000:]
        except OSError:
            return
        with contextlib.suppress(OSError):
            os.write(1, data if data.endswith(b"\n") else data + b"\n")

    def _submit(self, api: _Api, started: float) -> bool:
        """POST the job once the job API answers (it comes up after ray start returns)."""
        body = job_request(self.args, os.getcwd(), os.environ)
        last: object = None
        while time.monotonic() - started < START_TIMEOUT_S:
            if self.stopping:
                return False
            try:
                api.call("POST", "/api/jobs/", body)
                return True
            except Exception as exc:  # not up yet: the dashboard, or its job agent
                last = exc
                if _http_status(exc) == 400:  # refused (not "not ready"): say why
                    _say(f"Ray refused the job: {_http_body(exc)}")
                    return False
            self._sleep(0.25)
        _say(f"Ray's job API did not accept the job in {START_TIMEOUT_S:.0f}s: {last!r}")
        return False

    def _follow(self, api: _Api) -> int:
        """Copy the job's log until the job ends (or a stop); the exit code."""
        next_status = 0.0
        unanswered_since: float | None = None
        while not self.stopping:
            self.tail()
            now = time.monotonic()
            if now >= next_status:
                next_status = now + STATUS_EVERY_S
                try:
                    info = api.call("GET", f"/api/jobs/{self.sid}", timeout=2.0)
                    unanswered_since = None
                except Exception as exc:
                    unanswered_since = unanswered_since or now
                    if now - unanswered_since > STATUS_LOST_AFTER_S:
                        _say(f"Ray's job API stopped answering: {exc!r}")
                        return 1
                    info = None
                if isinstance(info, dict) and info.get("status") in TERMINAL:
                    self.tail()
                    code, message = job_exit(info)
                    if message:
                        _say(message)
                    return code
            self._sleep(TAIL_EVERY_S)
        return self.stop_job()

    def stop_job(self) -> int:
        """A stop (cancel, timeout, disk limit): the job's processes get the grace, less a
        margin, to end after the SIGTERM (theirs came from the supervisor; this one for
        any that did not); Ray's daemons are not waited for."""
        _say(f"stopping the Ray job {self.sid} and its cluster")
        self.signal_all(signal.SIGTERM)
        end = time.monotonic() + max(0.0, self.args.stop_grace_s - STOP_MARGIN_S)
        while time.monotonic() < end:
            self.tail()
            self.reap()
            if not self.job_processes():
                break
            time.sleep(TAIL_EVERY_S)
        return STOPPED_EXIT

    def job_processes(self) -> list[int]:
        """The job's entrypoint and what it started: Ray gives them (alone) its job config
        in their environment; Ray's daemons and workers do not count."""
        return [pid for pid in self.live_below() if pid not in self.daemons and _is_job(pid)]

    def finish(self) -> None:
        """Nothing of the cluster outlives the driver: kill, reap, remove the temp dir."""
        import shutil

        grace = 0.0 if self.stopping else DAEMON_GRACE_S
        with contextlib.suppress(Exception):
            self.kill_all(grace)
            self.tail()
        if self._log is not None:
            with contextlib.suppress(OSError):
                self._log.close()
        shutil.rmtree(self.temp, ignore_errors=True)


JOB_ENV_MARK = b"RAY_JOB_CONFIG_JSON_ENV_VAR="  # Ray's, in its job entrypoint's environment


def _is_job(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return any(v.startswith(JOB_ENV_MARK) for v in f.read().split(b"\0"))
    except OSError:
        return False


def _http_status(exc: BaseException) -> int | None:
    code = getattr(exc, "code", None)
    return code if isinstance(code, int) else None


def _http_body(exc: BaseException) -> str:
    try:
        body: bytes = exc.read()  # type: ignore[attr-defined]
        return body.decode("utf-8", "replace").strip()[:2000]
    except Exception:
        return str(exc)


def main(argv: Sequence[str]) -> int:
    try:
        args = parse_argv(argv[1:])
    except ValueError as exc:
        _say(f"raydriver: {exc}")
        return 2
    return Driver(args).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
