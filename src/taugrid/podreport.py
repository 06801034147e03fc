"""The reporting sidecar of a cluster attempt (``python -m taugrid.podhelper report``, a
native sidecar in rank 0's pod, or the Ray head's): it tells the server what only the pod
can see, through ``server.pod_reports`` with the attempt's report token.

- Metrics: the lines the workload appends to ``$TAU_METRICS_FILE`` go to the server as
  they are written (whole lines, by offset: a resend appends nothing twice, and a server
  that lost the end of its copy is sent it again), so ``tau metrics``, ``metrics_last``
  and "progressing" work on a cluster as they do locally.
- Checkpoints (``TAU_REPORT_CHECKPOINTS=1``: a workspace's PVC, which the server does not
  mount): the ``step-*`` directories under ``$TAU_CHECKPOINT_DIR`` with their manifests
  and the verdict after hashing every file with the SDK's own check, once per
  checkpoint; the server chooses the next attempt's resume point from them.

A pass runs every ``TAU_REPORT_INTERVAL`` seconds and once more on SIGTERM (the kubelet
stops sidecars after the workload), then it exits 0. The server unreachable is a line
on stderr and another try next pass: the pod's files are the originals. In another
rank's pod (``JOB_COMPLETION_INDEX`` > 0) it only waits to be stopped: rank 0 speaks
for the run. Standard library and the SDK only; the token never appears in a line.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from taugrid.sdk._store import MANIFEST, inspect, step_dirs

CHUNK = 1 << 20  # the server's limit per metrics POST
TIMEOUT_S = 30.0


class ReportRefused(Exception):
    """The server will never take this (a 401/403/404/413): stop sending that kind."""


@dataclass
class Reporter:
    url: str  # .../api/v1/runs/<run>/attempts/<k>
    token: str
    metrics_file: Path | None
    checkpoint_dir: Path | None = None
    offset: int | None = None  # the server's size of the metrics copy; None: ask it
    _hashed: dict[tuple[int, str], str | None] = field(default_factory=dict)
    _sent: list[dict[str, Any]] | None = None
    _refused: set[str] = field(default_factory=set)

    def _call(self, method: str, path: str, body: bytes, ctype: str) -> tuple[int, Any]:
        req = urllib.request.Request(
            self.url + path,
            data=body,
            method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": ctype},
        )
        try:
            with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:
                return resp.status, json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            try:
                doc = json.loads(exc.read() or b"null")
            except ValueError:
                doc = None
            if exc.code in (401, 403, 404, 413):
                raise ReportRefused(f"{exc.code} {exc.reason}") from None
            return exc.code, doc

    # -- metrics --------------------------------------------------------------------------
    def send_metrics(self) -> int:
        """Send what the server lacks, up to the last whole line; bytes sent."""
        if self.metrics_file is None or "metrics" in self._refused:
            return 0
        try:
            size = self.metrics_file.stat().st_size
        except FileNotFoundError:
            return 0
        if self.offset is None or self.offset > size:
            self.offset = self._post_metrics(0, b"")  # where the server's copy ends
            if self.offset is None:
                return 0
        sent = 0
        with open(self.metrics_file, "rb") as f:
            while self.offset < size:
                f.seek(self.offset)
                data = f.read(min(CHUNK, size - self.offset))
                end = data.rfind(b"\n") + 1
                if end == 0:  # a line still being written (or one longer than a chunk)
                    if len(data) < CHUNK:
                        break
                    end = len(data)
                got = self._post_metrics(self.offset, data[:end])
                if got is None:
                    break
                sent += max(0, got - self.offset)
                self.offset = got
        return sent

    def _post_metrics(self, offset: int, data: bytes) -> int | None:
        try:
            status, doc = self._call(
                "POST", f"/metrics?offset={offset}", data, "application/x-ndjson"
            )
        except ReportRefused as exc:
            self._refused.add("metrics")
            _say(f"the server refused the metrics ({exc}); no more are sent")
            return None
        if status in (200, 409) and isinstance(doc, dict):
            size = doc.get("size", (doc.get("error") or {}).get("size"))
            if isinstance(size, int):
                return size
        _say(f"the server answered {status} to the metrics; trying again later")
        return None

    # -- checkpoints ----------------------------------------------------------------------
    def seen_checkpoints(self) -> list[dict[str, Any]]:
        """Every step directory with its manifest and verdict (each hashed once)."""
        assert self.checkpoint_dir is not None
        out = []
        hashed, self._hashed = self._hashed, {}  # only the checkpoints still there stay
        for step, path in step_dirs(self.checkpoint_dir):
            try:
                raw = (path / MANIFEST).read_bytes()
            except OSError:
                raw = None
            quick = inspect(path, step, full=False)
            if raw is None or not quick.verified:
                problem = quick.problem
            else:
                digest = (step, hashlib.sha256(raw).hexdigest())
                if digest not in hashed:
                    hashed[digest] = inspect(path, step, full=True).problem
                problem = self._hashed[digest] = hashed[digest]
            manifest = raw.decode("utf-8", "replace") if raw is not None else None
            out.append({"step": step, "manifest": manifest, "problem": problem})
        return out

    def send_checkpoints(self) -> bool:
        if self.checkpoint_dir is None or "checkpoints" in self._refused:
            return False
        seen = self.seen_checkpoints()
        if seen == self._sent:
            return False
        body = json.dumps({"checkpoints": seen}).encode()
        try:
            status, _ = self._call("PUT", "/checkpoints", body, "application/json")
        except ReportRefused as exc:
            self._refused.add("checkpoints")
            _say(f"the server refused the checkpoints ({exc}); no more are sent")
            return False
        if status != 200:
            _say(f"the server answered {status} to the checkpoints; trying again later")
            return False
        self._sent = seen
        return True

    def once(self) -> None:
        for step in (self.send_metrics, self.send_checkpoints):
            try:
                step()
            except (urllib.error.URLError, OSError) as exc:
                _say(f"cannot reach the server: {getattr(exc, 'reason', exc)}")


def _say(line: str) -> None:
    print(f"tau report: {line}", file=sys.stderr, flush=True)


def from_env(env: dict[str, str]) -> Reporter:
    metrics = env.get("TAU_METRICS_FILE")
    checkpoints = env.get("TAU_CHECKPOINT_DIR") if env.get("TAU_REPORT_CHECKPOINTS") else None
    return Reporter(
        url=env["TAU_REPORT_URL"].rstrip("/"),
        token=env["TAU_REPORT_TOKEN"],
        metrics_file=Path(metrics) if metrics else None,
        checkpoint_dir=Path(checkpoints) if checkpoints else None,
    )


def run(env: dict[str, str] | None = None) -> int:
    env = dict(os.environ if env is None else env)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    if env.get("JOB_COMPLETION_INDEX", "0") not in ("", "0"):
        stop.wait()  # rank 0's sidecar reports for the run; a sidecar must not exit early
        return 0
    missing = [k for k in ("TAU_REPORT_URL", "TAU_REPORT_TOKEN") if not env.get(k)]
    if missing:
        _say(f"{', '.join(missing)} not set (this runs as a TauGrid pod's sidecar)")
        return 2
    reporter = from_env(env)
    interval = float(env.get("TAU_REPORT_INTERVAL") or 5)
    while not stop.wait(interval):
        reporter.once()
    reporter.once()  # the workload has ended: its last lines and checkpoints
    return 0
