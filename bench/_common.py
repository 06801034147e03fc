"""Shared pieces of the benchmarks: a private server, a keep-alive API client, results.

Each benchmark starts its own ``python -m taugrid.server`` on a fresh temporary TAU_HOME
(loopback only), and on the way out stops it and kills every process still tied to that
home: supervisors (their command line names the home) and workloads (their working
directory is inside it). Nothing is killed by name.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import gzip
import hashlib
import http.client
import io
import json
import math
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO / "bench" / "results"
VENV_BIN = Path(sys.prefix) / "bin"  # the venv running the benchmark (has `tau`)
TERMINAL = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})
_LOAD_AT_START = os.getloadavg()


# -- statistics --------------------------------------------------------------------------
def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile, ``q`` in [0, 100]."""
    data = sorted(values)
    if not data:
        return math.nan
    pos = (len(data) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def median(values: Iterable[float]) -> float:
    return statistics.median(list(values))


def spread(values: Sequence[float], digits: int = 3) -> dict[str, float]:
    """Median, quartiles and extremes of ``values`` (rounded): how much a figure moved."""
    return {
        "median": round(percentile(values, 50), digits),
        "p25": round(percentile(values, 25), digits),
        "p75": round(percentile(values, 75), digits),
        "min": round(min(values), digits),
        "max": round(max(values), digits),
        "n": len(values),
    }


def ms(seconds: float) -> float:
    return round(seconds * 1000.0, 2)


# -- environment -------------------------------------------------------------------------
def clean_env(home: Path | None = None) -> dict[str, str]:
    """The caller's environment without any TAU_* variable (plus TAU_HOME if given)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAU_")}
    if home is not None:
        env["TAU_HOME"] = str(home)
    return env


def machine() -> dict[str, Any]:
    return {
        "date": datetime.date.today().isoformat(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "load_average_at_start": [round(x, 2) for x in _LOAD_AT_START],
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
    }


def write_results(name: str, data: dict[str, Any]) -> Path:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    payload = {"benchmark": name, "machine": machine(), **data}
    path.write_text(json.dumps(payload, indent=2, sort_keys=False) + "\n")
    return path


def headline(
    metric: str, value: float, *, target: str | None = None, ok: bool | None = None
) -> dict[str, Any]:
    """One row of the summary table (``bench.all`` prints these)."""
    return {"metric": metric, "value": value, "target": target, "ok": ok}


def print_headlines(rows: Sequence[dict[str, Any]]) -> None:
    for row in rows:
        target = f"   target {row['target']}" if row.get("target") else ""
        verdict = {True: "  [ok]", False: "  [MISSED]", None: ""}[row.get("ok")]
        print(f"  {row['metric']:<44} {fmt_value(row['value']):>10}{target}{verdict}")


def fmt_value(value: Any) -> str:
    if isinstance(value, float):
        if abs(value) < 10:
            return f"{value:,.3f}"
        return f"{value:,.1f}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


# -- HTTP --------------------------------------------------------------------------------
class ApiError(Exception):
    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"HTTP {status}: {body[:300]!r}")
        self.status = status
        self.body = body


class Api:
    """One keep-alive HTTP/1.1 connection to the server (not thread-safe: one per thread)."""

    def __init__(self, url: str, token: str, timeout: float = 60.0) -> None:
        parsed = urllib.parse.urlsplit(url)
        assert parsed.hostname in ("127.0.0.1", "localhost", "::1"), "loopback only"
        self.host = parsed.hostname
        self.port = parsed.port or 80
        self.timeout = timeout
        self.headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        self.conn: http.client.HTTPConnection | None = None
        self.reconnects = 0

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def request(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        json_body: Any = None,
        headers: dict[str, str] | None = None,
        ok: Iterable[int] = (200, 201, 204),
    ) -> Any:
        hdrs = {**self.headers, **(headers or {})}
        if json_body is not None:
            body = json.dumps(json_body).encode()
            hdrs["Content-Type"] = "application/json"
        for tries_left in (1, 0):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            try:
                self.conn.request(method, path, body=body, headers=hdrs)
                resp = self.conn.getresponse()
                data = resp.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                # The server closed an idle keep-alive connection; every request we retry
                # is idempotent (submits carry an Idempotency-Key).
                self.close()
                self.reconnects += 1
                if not tries_left:
                    raise
                continue
            except BaseException:
                self.close()  # never reuse a connection left mid-request
                raise
            if resp.status not in ok:
                raise ApiError(resp.status, data)
            return json.loads(data) if data else None
        raise AssertionError("unreachable")

    def submit(self, body: dict[str, Any], key: str) -> dict[str, Any]:
        out: dict[str, Any] = self.request(
            "POST", "/api/v1/runs", json_body=body, headers={"Idempotency-Key": key}
        )
        return out

    def get_run(self, run_id: str) -> dict[str, Any]:
        out: dict[str, Any] = self.request("GET", f"/api/v1/runs/{run_id}")
        return out

    def cancel(self, run_id: str) -> dict[str, Any]:
        out: dict[str, Any] = self.request("POST", f"/api/v1/runs/{run_id}/cancel")
        return out


# -- snapshot and submit payloads -----------------------------------------------------------
def tiny_snapshot() -> tuple[str, bytes]:
    """A one-file tar.gz workdir and its sha256 (what the CLI would upload)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        data = b"benchmark workdir\n"
        info = tarfile.TarInfo("README.txt")
        info.size, info.mode, info.mtime = len(data), 0o644, 0
        tar.addfile(info, io.BytesIO(data))
    gz = gzip.compress(raw.getvalue(), mtime=0)
    return hashlib.sha256(gz).hexdigest(), gz


def upload_snapshot(api: Api) -> str:
    digest, data = tiny_snapshot()
    api.request(
        "PUT",
        f"/api/v1/snapshots/{digest}",
        body=data,
        headers={"Content-Type": "application/gzip"},
    )
    return digest


def submit_body(
    argv: Sequence[str], digest: str, workdir: Path, overrides: Sequence[str] = ()
) -> dict[str, Any]:
    """The POST /api/v1/runs body ``tau run -- ARGV`` would send (same loader, same shape)."""
    from taugrid.domain.workload_env import submitter_env
    from taugrid.spec import spec_from_command

    loaded = spec_from_command(list(argv), workdir, list(overrides))
    return {
        "spec_source": loaded.source,
        "file_text": loaded.file_text,
        "overrides": loaded.overrides,
        "resolved": loaded.resolved,
        "spec_hash": loaded.spec_hash,
        "snapshot_digest": digest,
        "submitter": "bench",
        "env": submitter_env(os.environ),
    }


# -- the server ----------------------------------------------------------------------------
class BenchServer:
    """A private ``python -m taugrid.server`` on a fresh temporary TAU_HOME."""

    def __init__(self, name: str, *, gpus: int | None = None) -> None:
        self.name = name
        self.gpus = gpus
        self.home = Path(tempfile.mkdtemp(prefix=f"tau-bench-{name}-")).resolve()
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.token = ""
        self._stopped = False
        self._lock = threading.Lock()

    @property
    def db_path(self) -> Path:
        return self.home / "tau.db"

    def __enter__(self) -> BenchServer:
        atexit.register(self.stop)
        if threading.current_thread() is threading.main_thread():
            # SIGTERM/SIGHUP would end the process without running finally or atexit.
            signal.signal(signal.SIGTERM, _exit_on_signal)
            signal.signal(signal.SIGHUP, _exit_on_signal)
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def server_args(self) -> list[str]:
        """What this server's start adds to ``python -m taugrid.server --home H``."""
        return ["--gpus", str(self.gpus)] if self.gpus is not None else []

    def start(self, timeout: float = 30.0) -> None:
        args = [sys.executable, "-m", "taugrid.server", "--home", str(self.home)]
        args += self.server_args()
        with (self.home / "server.log").open("ab") as log:
            self.proc = subprocess.Popen(
                args,
                cwd=REPO,
                env=clean_env(self.home),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        info_path = self.home / "server.json"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited {self.proc.returncode}: {self.log_tail()}")
            try:
                info = json.loads(info_path.read_text())
                if info.get("pid") == self.proc.pid:
                    self.url = str(info["url"])
                    self.token = (self.home / "token").read_text().strip()
                    return
            except (OSError, ValueError):
                pass
            time.sleep(0.02)
        raise RuntimeError(f"server did not publish server.json in {timeout:.0f}s")

    def api(self, timeout: float = 60.0) -> Api:
        return Api(self.url, self.token, timeout)

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = (self.home / "server.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        """Stop the server, kill anything left under its home, delete the home. Idempotent."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        if self.proc is not None:
            terminate(self.proc)
        leftovers = kill_processes_under(self.home)
        if leftovers:
            print(f"  (killed {leftovers} leftover process(es) of {self.home})", file=sys.stderr)
        shutil.rmtree(self.home, ignore_errors=True)


def terminate(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, 10 s for it to exit, then SIGKILL."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def _exit_on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def kill_processes_under(home: Path, rounds: int = 5) -> int:
    """SIGKILL every process whose command line names ``home`` or whose cwd is in it.

    That is exactly the supervisors (``python supervisor.py HOME/runs/...``) and the
    workloads (cwd ``HOME/runs/<id>/workdir``) this benchmark's server started; they
    live in their own sessions, so stopping the server does not reach them.
    """
    home_s = str(home)
    me = os.getpid()
    killed = 0
    for _ in range(rounds):
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == me:
                continue
            pid = int(entry)
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
                cwd = os.readlink(f"/proc/{pid}/cwd")
            except OSError:
                continue
            if home_s.encode() in cmdline or cwd == home_s or cwd.startswith(home_s + "/"):
                found.append(pid)
        for pid in found:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        killed += len(found)
        if not found:
            break
        time.sleep(0.1)
    return killed


# -- waiting on runs -----------------------------------------------------------------------
def wait_state(
    api: Api, run_id: str, states: Iterable[str], timeout: float = 30.0, poll_s: float = 0.02
) -> dict[str, Any]:
    wanted = set(states)
    deadline = time.monotonic() + timeout
    while True:
        run = api.get_run(run_id)
        if run["state"] in wanted:
            return run
        if time.monotonic() > deadline:
            raise TimeoutError(f"run {run_id} stuck in {run['state']}, wanted {sorted(wanted)}")
        time.sleep(poll_s)


def hold_gpu(api: Api, digest: str, workdir: Path) -> str:
    """Submit a long ``sleep`` asking for the server's one GPU; return once it RUNS."""
    body = submit_body(["sleep", "600"], digest, workdir, ["resources.gpus=1", "name=gpu-holder"])
    run_id: str = api.submit(body, "bench-gpu-holder")["run"]["id"]
    wait_state(api, run_id, {"RUNNING"}, timeout=30)
    return run_id


def count_events(db: Path) -> int:
    """``SELECT count(*) FROM events``, read-only, straight from the database file."""
    import sqlite3

    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return int(conn.execute("SELECT count(*) FROM events").fetchone()[0])
    finally:
        conn.close()


def raw_commits_per_s(path: Path, seconds: float = 2.0) -> dict[str, Any]:
    """Raw SQLite commits/s on the disk holding ``path``: WAL, synchronous=FULL (as the
    server), one single-row INSERT of an event-shaped row per transaction, in this process."""
    import sqlite3

    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        conn.execute("PRAGMA synchronous=FULL")
        sync = conn.execute("PRAGMA synchronous").fetchone()[0]
        conn.execute(
            "CREATE TABLE events (id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, at REAL NOT NULL,"
            " from_state TEXT, to_state TEXT NOT NULL, reason TEXT NOT NULL, message TEXT NOT NULL)"
        )
        row = ("bench-abcde", 0.0, "QUEUED", "CANCELLED", "Cancelled", "cancelled before start")
        n = 0
        t0 = time.perf_counter()
        deadline = t0 + seconds
        while time.perf_counter() < deadline:
            conn.execute("BEGIN")
            conn.execute(
                "INSERT INTO events (run_id, at, from_state, to_state, reason, message)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                row,
            )
            conn.execute("COMMIT")
            n += 1
        elapsed = time.perf_counter() - t0
    finally:
        conn.close()
    assert mode == "wal" and sync == 2, (mode, sync)  # 2 == FULL
    return {"commits": n, "seconds": round(elapsed, 3), "commits_per_s": round(n / elapsed, 1)}


def timed_get(
    conn: http.client.HTTPConnection, path: str, headers: dict[str, str]
) -> tuple[float, int]:
    """Seconds from the request sent to the last byte of the body read, and its size."""
    t0 = time.perf_counter()
    conn.request("GET", path, headers=headers)
    resp = conn.getresponse()
    body = resp.read()
    took = time.perf_counter() - t0
    if resp.status != 200:
        raise RuntimeError(f"GET {path}: {resp.status} {body[:200]!r}")
    return took, len(body)
