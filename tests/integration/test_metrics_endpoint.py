"""``GET /metrics`` on a real server process: who may scrape it in each mode, what a few
real runs put in it, and the server's JSON log lines.

- A local server answers on its own loopback URL without a token: runs by state, the
  ended runs, the waits, API latency by route *template*; nowhere a run id or a user.
- A shared server answers only the scrape token (401 without it, or with an API token);
  without a token file it says how to get one (404); its metrics port needs no token.
- ``--log-format json``: every line the server logs is one JSON object.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families
from tauproc import Tau

from servicecheck import require_bwrap


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_local_server_serves_its_metrics_without_a_token(tau: Tau) -> None:
    tau("run", "--wait", "--name", "ok", "--", "sh", "-c", "echo hi", check=True)
    assert tau("run", "--wait", "--name", "bad", "--", "sh", "-c", "exit 3").returncode == 3
    run_id = tau.json("status", "ok")["id"]
    url = tau.server_info()["url"]
    answer = httpx.get(f"{url}/metrics", timeout=10)
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain; version=")
    got = samples(answer.text)
    where = frozenset({("workspace", "default"), ("queue", "default")})
    assert got[("taugrid_runs", where | {("state", "succeeded")})] == 1
    assert got[("taugrid_runs", where | {("state", "failed")})] == 1
    ended = frozenset({("queue", "default")})
    assert got[("taugrid_runs_finished_total", ended | {("state", "succeeded")})] == 1
    assert got[("taugrid_runs_finished_total", ended | {("state", "failed")})] == 1
    assert got[("taugrid_submit_to_running_seconds_count", ended)] == 2
    assert got[("taugrid_admission_wait_seconds_count", ended)] == 2
    # The CLI's calls are timed by route template, never by the path it asked for.
    routes = {dict(labels).get("route") for name, labels in got if name.endswith("_count")}
    assert "/api/v1/runs/{ref}" in routes and "/api/v1/runs" in routes
    assert not any(r and ("ok" in r.split("/") or run_id in r) for r in routes)
    # Bounded labels: no run id, run name or user anywhere in a scrape.
    assert run_id not in answer.text and 'name="ok"' not in answer.text
    assert tau.token() not in answer.text


def test_a_shared_server_needs_the_scrape_token_or_its_metrics_port(tau: Tau) -> None:
    require_bwrap()
    tau.start_server("--shared")
    url = tau.server_info()["url"]
    refused = httpx.get(f"{url}/metrics", timeout=10)
    assert refused.status_code == 404
    assert "--metrics-token-file" in refused.json()["error"]["message"]
    tau.stop_server()
    token_file = tau.home.parent / "scrape-token"
    token_file.write_text("s" * 32 + "\n")
    port = free_port()
    tau(
        "server",
        "start",
        "--shared",
        check=True,
        TAU_METRICS_TOKEN_FILE=str(token_file),
        TAU_METRICS_PORT=str(port),
    )
    url = tau.server_info()["url"]
    admin = (tau.home / "admin-token").read_text().strip()
    assert httpx.get(f"{url}/metrics", timeout=10).status_code == 401
    wrong = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {admin}"}, timeout=10)
    assert wrong.status_code == 401  # an API token, even an admin's, is not the scrape token
    right = httpx.get(f"{url}/metrics", headers={"Authorization": "Bearer " + "s" * 32})
    assert right.status_code == 200 and "taugrid_build_info" in right.text
    # The metrics port: no auth (the platform exposes it to Prometheus alone).
    deadline = time.monotonic() + 10
    while True:
        try:
            own = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
            break
        except httpx.ConnectError:
            assert time.monotonic() < deadline
            time.sleep(0.1)
    assert own.status_code == 200 and "taugrid_runs" in own.text
    assert admin not in right.text and admin not in own.text


def test_a_bad_metrics_setting_stops_the_start_in_one_line(tau: Tau) -> None:
    proc = tau("server", "start", TAU_METRICS_PORT="http")
    assert proc.returncode != 0
    assert "TAU_METRICS_PORT" in proc.stderr and "Traceback" not in proc.stderr


def test_json_log_lines(tau: Tau, tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    with log.open("w") as out:
        import subprocess
        import sys

        server = subprocess.Popen(
            [sys.executable, "-m", "taugrid.server", "--log-format", "json", "--port", "0"],
            env=tau.env(),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 30
        while not (tau.home / "server.json").exists():
            assert time.monotonic() < deadline and server.poll() is None, log.read_text()
            time.sleep(0.05)
        url = tau.server_info()["url"]
        assert httpx.get(f"{url}/healthz", timeout=10).status_code == 200
    finally:
        server.terminate()
        server.wait(timeout=20)
    lines = [line for line in log.read_text().splitlines() if line.strip()]
    records = [json.loads(line) for line in lines]  # every line: one JSON object
    for record in records:
        assert {"time", "level", "logger", "message"} <= set(record), record
        assert record["time"].endswith("Z")
    assert any(r["message"].startswith(f"serving {url}") for r in records), records
