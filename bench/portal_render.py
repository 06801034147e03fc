"""The portal's pages with 10,000 runs in the store, and its log stream's lag behind the log.

Part 1, render: a real server (``python -m taugrid.server --gpus 1``, SQLite) whose store
holds 10,000 finished runs written straight into its database (over 4 workspaces, 3
queues, 3 submitters, mostly SUCCEEDED and FAILED, some CANCELLED; each with its attempt
and its 4 events, a quarter in one of 8 experiments, two thirds with ``metrics_last``)
and, through the API, one run holding the GPU, QUEUED runs waiting behind it (with the
engine's pending reason and position) and one real finished run for the run page: a
workload that logs 3 metrics a step with the SDK and prints a line a step, 50 steps an
attempt; its first attempt fails, so that ``restart.max=1`` gives it a second that
succeeds and writes an artifact (two attempts, a restart, an experiment, 9 events).
The browser's session is a real one: ``POST /api/v1/portal/link``, then ``GET
/portal/login?ticket=`` and its ``tau_session`` cookie.

Timed, from the request sent to the last byte of the body read, over one keep-alive
connection (what a user waits for, less the browser's parsing): ``GET /portal/runs`` (the
first page, 50 rows), ``GET /portal/runs?state=SUCCEEDED`` (a filtered page) and ``GET
/portal/runs/{id}`` (the run page), REQUESTS times each after WARMUP. Baseline,
interleaved one for one on a second keep-alive connection (the order alternating): the
API's JSON of the same thing, ``GET /api/v1/runs?limit=50`` with the same filter, and for
the run page ``GET /api/v1/runs/{id}`` (also recorded: that plus ``.../metrics`` and
``.../artifacts``, the three reads the page makes). Headlines: p50 and p99 per page (target
p99 under 200 ms on 2 cores), and portal p50 / API p50 per page.

Part 2, log lag: a fresh server and a real run of ``python -c`` that waits 1 s (both
streams connect meanwhile), then prints ``time.time()`` on a line of its own every 20 ms,
flushed, LOG_LINES times (~10 s). Two clients follow it at the same time, each an httpx
stream on its own connection: the portal's ``GET /portal/runs/{id}/logs/stream?follow=1``
with the session cookie (SSE, one ``line`` event per read) and the API's ``GET
/api/v1/runs/{id}/logs?follow=true`` with the token (plain text). For every line each
receives, lag = its receive time (``time.time()`` when the chunk holding it arrived) minus
the time stamped in it: how far behind the log file the reader is. Same lines, same
moments, same machine clock. Headlines: portal lag p50 and p99 (target p99 under 1 s),
portal p50 / API p50.
"""

from __future__ import annotations

import http.client
import http.cookies
import random
import re
import sqlite3
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from bench._common import (
    TERMINAL,
    Api,
    BenchServer,
    headline,
    hold_gpu,
    median,
    ms,
    percentile,
    print_headlines,
    submit_body,
    timed_get,
    upload_snapshot,
    wait_state,
    write_results,
)

NAME = "portal_render"
STORED = 10_000
QUEUED = 20
REQUESTS = 200
WARMUP = 5
LOG_LINES = 500
LOG_EVERY_S = 0.02
TARGET_RENDER_P99_MS = 200.0
TARGET_LAG_P99_MS = 1000.0

DETAIL_WORKLOAD = """\
import os, sys, taugrid
attempt = int(os.environ.get("TAU_ATTEMPT", "0"))
for step in range(attempt * 50, attempt * 50 + 50):
    loss = 2.0 / (step + 1)
    taugrid.log(step=step, loss=loss, lr=1e-3 * 0.99**step, accuracy=1 - loss / 2)
    print(f"step {step} loss {loss:.4f}", flush=True)
if attempt == 0:
    print("simulated failure", file=sys.stderr, flush=True)
    sys.exit(1)
with open(os.path.join(os.environ["TAU_OUTPUT_DIR"], "summary.json"), "w") as f:
    f.write('{"loss": %f}' % loss)
"""

LOG_WORKLOAD = f"""\
import time
time.sleep(1.0)
for i in range({LOG_LINES}):
    print(f"{{time.time():.6f}} {{i}}", flush=True)
    time.sleep({LOG_EVERY_S})
"""


# -- filling the store ------------------------------------------------------------------------
def seed_finished(db_path: Path, n: int) -> dict[str, int]:
    """``n`` finished runs with their attempt and events, written straight into the store
    (older than anything submitted through the API, so the newest page mixes both)."""
    from taugrid.store import connect
    from taugrid.store.tables import attempts, events, runs

    raw = sqlite3.connect(db_path)
    try:
        seq0 = int(raw.execute("SELECT coalesce(max(queued_seq), 0) FROM runs").fetchone()[0])
    finally:
        raw.close()
    db = connect(f"sqlite:///{db_path}")
    rng = random.Random(7)
    now = time.time()
    rows: list[dict[str, Any]] = []
    atts: list[dict[str, Any]] = []
    evs: list[dict[str, Any]] = []
    states: dict[str, int] = {}
    for i in range(n):
        state = rng.choice(("SUCCEEDED",) * 5 + ("FAILED",) * 3 + ("CANCELLED",))
        states[state] = states.get(state, 0) + 1
        rid = f"train-{i:05d}-{rng.randrange(36**5):05x}"
        at = now - rng.uniform(120, 30 * 86400)
        start, end = at + rng.uniform(0.5, 30), at + rng.uniform(60, 7200)
        reason, message, code = {
            "SUCCEEDED": ("Completed", "", 0),
            "FAILED": ("ExitCode", "the workload exited with code 1", 1),
            "CANCELLED": ("Cancelled", "cancelled by its submitter", None),
        }[state]
        exp = {"name": f"sweep-{i % 8}", "group": f"g{i % 3}", "tags": {"lr": "3e-4"}}
        in_exp = i % 4 == 0
        step = rng.randrange(1, 5000)
        rows.append(
            {
                "id": rid,
                "name": "train",
                "workspace": f"team-{i % 4}",
                "queue": ("default", "gpu", "batch")[i % 3],
                "priority": None,
                "state": state,
                "reason": reason,
                "message": message,
                "created_at": at,
                "updated_at": end,
                "started_at": start,
                "finished_at": end,
                "exit_code": code,
                "submitter": ("ann", "bo", "cy")[i % 3],
                "spec_source": "tau.yaml",
                "spec_file_text": None,
                "spec_overrides": [f"env.LR={i % 7}e-4"],
                "spec_resolved": {"command": ["python", "train.py"], "resources": {"gpus": 1}},
                "spec_hash": "h" * 64,
                "snapshot_digest": "d" * 64,
                "env_summary": {},
                "gpus": 1,
                "queued_seq": seq0 + i + 1,
                "attempt_count": 1,
                "priority_value": 0,
                "restarts": 0,
                "experiment_name": exp["name"] if in_exp else None,
                "experiment": exp if in_exp else None,
                "metrics_last": {
                    "step": step,
                    "time": end,
                    "values": {"loss": 1.0 / step, "accuracy": 0.9},
                }
                if i % 3
                else None,
            }
        )
        atts.append(
            {
                "run_id": rid,
                "attempt": 0,
                "created_at": at,
                "started_at": start,
                "finished_at": end,
                "exit_code": code,
                "outcome": state.lower(),
                "placement": {"host": "local", "gpus": [0]},
                "attempt_dir": f"/nowhere/{rid}",
            }
        )
        evs += [
            _ev(rid, at, None, "QUEUED", "Submitted"),
            _ev(rid, at + 0.2, "QUEUED", "ADMITTED", "Admitted"),
            _ev(rid, start, "ADMITTED", "RUNNING", "Started"),
            _ev(rid, end, "RUNNING", state, reason, message),
        ]
    with db.begin() as conn:
        for i in range(0, n, 1000):
            conn.execute(runs.insert(), rows[i : i + 1000])
            conn.execute(attempts.insert(), atts[i : i + 1000])
        for i in range(0, len(evs), 4000):
            conn.execute(events.insert(), evs[i : i + 4000])
    db.dispose()
    return states


def _ev(
    rid: str, at: float, frm: str | None, to: str, reason: str, message: str = ""
) -> dict[str, Any]:
    return {
        "run_id": rid,
        "at": at,
        "from_state": frm,
        "to_state": to,
        "reason": reason,
        "message": message,
    }


# -- the portal's session ---------------------------------------------------------------------
def portal_cookie(srv: BenchServer, api: Api) -> str:
    """A real browser login: a one-time link from the API, redeemed for the cookie."""
    from taugrid.server.oidc import SESSION_COOKIE

    link = api.request("POST", "/api/v1/portal/link", json_body={"next": "/portal/runs"})
    target = link["url"].removeprefix(srv.url)
    conn = _conn(srv)
    try:
        conn.request("GET", target)
        resp = conn.getresponse()
        resp.read()
        if resp.status != 303:
            raise RuntimeError(f"portal login: HTTP {resp.status}")
        jar = http.cookies.SimpleCookie()
        for value in resp.headers.get_all("Set-Cookie") or []:
            jar.load(value)
    finally:
        conn.close()
    return f"{SESSION_COOKIE}={jar[SESSION_COOKIE].value}"


def _conn(srv: BenchServer) -> http.client.HTTPConnection:
    host, port = srv.url.removeprefix("http://").split(":")
    return http.client.HTTPConnection(host, int(port), timeout=60)


# -- part 1: rendering ------------------------------------------------------------------------
def render_part() -> dict[str, Any]:
    with BenchServer(f"{NAME}-pages", gpus=1) as srv, tempfile.TemporaryDirectory() as cwd:
        api = srv.api()
        digest = upload_snapshot(api)
        detail_body = submit_body(
            [sys.executable, "-c", DETAIL_WORKLOAD],
            digest,
            Path(cwd),
            [
                "name=portal-detail",
                "restart.max=1",
                "restart.on=[error]",
                "restart.backoff=0s",
                "experiment.name=portal-bench",
            ],
        )
        detail_id = api.submit(detail_body, str(uuid.uuid4()))["run"]["id"]
        detail = wait_state(api, detail_id, TERMINAL, timeout=60)
        hold_gpu(api, digest, Path(cwd))
        body = submit_body(["true"], digest, Path(cwd), ["resources.gpus=1", "name=waits"])
        for _ in range(QUEUED):
            api.submit(body, str(uuid.uuid4()))
        seeded = seed_finished(srv.db_path, STORED)
        cookie = portal_cookie(srv, api)
        in_store = api.request("GET", "/healthz")["runs"]

        pages = {
            "runs_first_page": ("/portal/runs", ["/api/v1/runs?limit=50"]),
            "runs_state_succeeded": (
                "/portal/runs?state=SUCCEEDED",
                ["/api/v1/runs?limit=50&state=SUCCEEDED"],
            ),
            "run_page": (
                f"/portal/runs/{detail_id}",
                [
                    f"/api/v1/runs/{detail_id}",
                    f"/api/v1/runs/{detail_id}/metrics",
                    f"/api/v1/runs/{detail_id}/artifacts",
                ],
            ),
        }
        portal_conn, api_conn = _conn(srv), _conn(srv)
        portal_h = {"Cookie": cookie, "Accept": "text/html"}
        api_h = {"Authorization": f"Bearer {srv.token}", "Accept": "application/json"}
        took: dict[str, dict[str, list[float]]] = {
            k: {"portal": [], "api": [], "api_all_reads": []} for k in pages
        }
        sizes: dict[str, dict[str, int]] = {}
        for i in range(WARMUP + REQUESTS):
            for key, (portal_path, api_paths) in pages.items():
                sides = ["portal", "api"] if i % 2 == 0 else ["api", "portal"]
                for side in sides:
                    if side == "portal":
                        t, size = timed_get(portal_conn, portal_path, portal_h)
                        if i >= WARMUP:
                            took[key]["portal"].append(t)
                            sizes.setdefault(key, {})["portal_bytes"] = size
                        continue
                    parts = [timed_get(api_conn, p, api_h) for p in api_paths]
                    if i >= WARMUP:
                        took[key]["api"].append(parts[0][0])
                        took[key]["api_all_reads"].append(sum(t for t, _ in parts))
                        sizes.setdefault(key, {})["api_bytes"] = parts[0][1]
        portal_conn.close()
        api_conn.close()
        detail = api.get_run(detail_id)
        api.close()
    out: dict[str, Any] = {
        "runs_in_store": in_store,
        "seeded_states": seeded,
        "queued_through_api": QUEUED,
        "requests_each": REQUESTS,
        "detail_run": {
            "state": detail["state"],
            "attempts": detail["attempts"],
            "restarts": detail["restarts"],
            "events": len(detail["events"]),
            "checkpoints": len(detail["checkpoints"]),
        },
    }
    for key, times in took.items():
        p50 = median(times["portal"])
        out[key] = {
            "portal_ms": _dist(times["portal"]),
            "api_ms": _dist(times["api"]),
            **sizes[key],
            "ratio_p50_portal_over_api": round(p50 / median(times["api"]), 2),
            "ratio_p99_portal_over_api": round(
                percentile(times["portal"], 99) / percentile(times["api"], 99), 2
            ),
        }
        if key == "run_page":
            out[key]["api_detail_metrics_artifacts_ms"] = _dist(times["api_all_reads"])
            out[key]["ratio_p50_portal_over_api_all_reads"] = round(
                p50 / median(times["api_all_reads"]), 2
            )
    return out


def _dist(values: list[float]) -> dict[str, float]:
    return {
        "p50": ms(median(values)),
        "p90": ms(percentile(values, 90)),
        "p99": ms(percentile(values, 99)),
        "min": ms(min(values)),
        "max": ms(max(values)),
    }


# -- part 2: the log stream's lag -------------------------------------------------------------
_STAMP = re.compile(rb"(\d{9,}\.\d+) (\d+)")


class Follower(threading.Thread):
    """One streaming GET; for every stamped line it receives, (index, stamp, received)."""

    def __init__(self, url: str, headers: dict[str, str], sse: bool) -> None:
        super().__init__(daemon=True)
        self.url, self.headers, self.sse = url, headers, sse
        self.connected = threading.Event()
        self.lines: list[tuple[int, float, float]] = []
        self.events = 0
        self.done = False
        self.error: str | None = None

    def run(self) -> None:
        try:
            with (
                httpx.Client(timeout=httpx.Timeout(60.0)) as client,
                client.stream("GET", self.url, headers=self.headers) as resp,
            ):
                if resp.status_code != 200:
                    raise RuntimeError(f"HTTP {resp.status_code}: {resp.read()[:200]!r}")
                self.connected.set()
                rest = b""
                for chunk in resp.iter_bytes():
                    got = time.time()
                    rest += chunk
                    *complete, rest = rest.split(b"\n")
                    for line in complete:
                        self._line(line, got)
                if rest:
                    self._line(rest, time.time())
        except Exception as exc:
            self.error = repr(exc)
        finally:
            self.connected.set()

    def _line(self, line: bytes, got: float) -> None:
        if self.sse:
            if line.startswith(b"event: line"):
                self.events += 1
            elif line.startswith(b"event: done"):
                self.done = True
            if not line.startswith(b"data: "):
                return
        m = _STAMP.search(line)
        if m:
            self.lines.append((int(m.group(2)), float(m.group(1)), got))


def lag_part() -> dict[str, Any]:
    with BenchServer(f"{NAME}-logs") as srv, tempfile.TemporaryDirectory() as cwd:
        api = srv.api()
        digest = upload_snapshot(api)
        cookie = portal_cookie(srv, api)
        body = submit_body([sys.executable, "-c", LOG_WORKLOAD], digest, Path(cwd), ["name=ticks"])
        run_id = api.submit(body, str(uuid.uuid4()))["run"]["id"]
        portal = Follower(
            f"{srv.url}/portal/runs/{run_id}/logs/stream?follow=1",
            {"Cookie": cookie, "Accept": "text/event-stream"},
            sse=True,
        )
        plain = Follower(
            f"{srv.url}/api/v1/runs/{run_id}/logs?follow=true",
            {"Authorization": f"Bearer {srv.token}"},
            sse=False,
        )
        for f in (portal, plain):
            f.start()
        for f in (portal, plain):
            f.connected.wait(30)
        both_connected = time.time()
        run = wait_state(api, run_id, TERMINAL, timeout=60, poll_s=0.2)
        for f in (portal, plain):
            f.join(30)
        api.close()
    for f in (portal, plain):
        if f.error or f.is_alive():
            raise RuntimeError(f"{f.url}: {f.error or 'still streaming after the run ended'}")
    out: dict[str, Any] = {
        "run_state": run["state"],
        "lines_written": LOG_LINES,
        "every_ms": LOG_EVERY_S * 1000,
        "portal_sse_events": portal.events,
        "portal_done_event": portal.done,
    }
    for label, f in (("portal", portal), ("api", plain)):
        # Only lines stamped after both streams were connected: no backlog read at connect.
        lag = [got - at for _, at, got in f.lines if at >= both_connected]
        out[label] = {
            "lines_received": len(f.lines),
            "lines_counted": len(lag),
            "missing": sorted(set(range(LOG_LINES)) - {i for i, _, _ in f.lines})[:20],
            "lag_ms": _dist(lag),
            "lag_samples_ms": [ms(x) for x in lag],
        }
    out["ratio_p50_portal_over_api"] = round(
        out["portal"]["lag_ms"]["p50"] / out["api"]["lag_ms"]["p50"], 2
    )
    out["ratio_p99_portal_over_api"] = round(
        out["portal"]["lag_ms"]["p99"] / out["api"]["lag_ms"]["p99"], 2
    )
    return out


def main() -> int:
    print(f"{NAME}: pages with {STORED:,} runs in the store, {REQUESTS} requests each ...")
    render = render_part()
    print(f"{NAME}: log stream lag, {LOG_LINES} lines every {LOG_EVERY_S * 1000:.0f} ms ...")
    lag = lag_part()
    rows = []
    for key, label in (
        ("runs_first_page", "runs list"),
        ("runs_state_succeeded", "runs ?state=SUCCEEDED"),
        ("run_page", "run page"),
    ):
        r = render[key]
        p99 = r["portal_ms"]["p99"]
        rows += [
            headline(f"{label} p50 ms", r["portal_ms"]["p50"]),
            headline(
                f"{label} p99 ms",
                p99,
                target=f"< {TARGET_RENDER_P99_MS:.0f}",
                ok=p99 < TARGET_RENDER_P99_MS,
            ),
            headline(f"{label} p50 / API JSON p50", r["ratio_p50_portal_over_api"]),
        ]
    rows.append(
        headline(
            "run page p50 / API detail+metrics+artifacts",
            render["run_page"]["ratio_p50_portal_over_api_all_reads"],
        )
    )
    lag_p99 = lag["portal"]["lag_ms"]["p99"]
    rows += [
        headline("portal log SSE lag p50 ms", lag["portal"]["lag_ms"]["p50"]),
        headline(
            "portal log SSE lag p99 ms",
            lag_p99,
            target=f"< {TARGET_LAG_P99_MS:.0f}",
            ok=lag_p99 < TARGET_LAG_P99_MS and not lag["portal"]["missing"],
        ),
        headline("log lag p50 portal SSE / API follow", lag["ratio_p50_portal_over_api"]),
    ]
    result = {
        "render": render,
        "log_lag": lag,
        "targets": {"render_p99_ms": TARGET_RENDER_P99_MS, "log_lag_p99_ms": TARGET_LAG_P99_MS},
        "headlines": rows,
    }
    path = write_results(NAME, result)
    for key in ("runs_first_page", "runs_state_succeeded", "run_page"):
        r = render[key]
        print(
            f"  {key:<22} portal p50 {r['portal_ms']['p50']:6.1f} p99 {r['portal_ms']['p99']:6.1f}"
            f" ms ({r['portal_bytes']:,} B)   API p50 {r['api_ms']['p50']:6.1f}"
            f" p99 {r['api_ms']['p99']:6.1f} ms ({r['api_bytes']:,} B)"
        )
    for label in ("portal", "api"):
        s = lag[label]
        print(
            f"  log lag {label:<7} p50 {s['lag_ms']['p50']:6.1f} ms  p99 {s['lag_ms']['p99']:6.1f}"
            f" ms  ({s['lines_counted']}/{LOG_LINES} lines counted)"
        )
    print_headlines(rows)
    print(f"  results: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
