"""OpenTelemetry tracing on a real server process (docs/observability.md, "Tracing").

- With ``OTEL_EXPORTER_OTLP_ENDPOINT`` set, a real ``tau run --wait`` sends one trace to
  an OTLP/HTTP receiver (a tiny HTTP server here, decoding the protobuf POSTs to
  ``/v1/traces``): ``submit`` and the stages to running, with the run's attributes and
  none of its environment, the token or the request's body.
- Set without the ``otel`` extra, the server refuses to start in one line naming it.
- Without an endpoint, TauGrid imports nothing of OpenTelemetry (``-X importtime``).
"""

from __future__ import annotations

import gzip
import itertools
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from tauproc import Tau

from servicecheck import require_module

SECRET = "hunter2-env-value"
STAGES = ("submit", "queued", "admission", "launch", "starting")
NEED_EXTRA = "the otel extra (pip install 'taugrid[otel]'): the OTLP exporter and its protobufs"


class Receiver:
    """An OTLP/HTTP traces endpoint: keeps every POSTed body and answers 200."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.paths: list[str] = []
        self.types: list[str] = []
        lock = self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                with lock:
                    receiver.paths.append(self.path)
                    receiver.types.append(self.headers.get("content-type") or "")
                    receiver.bodies.append(body)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def spans(self) -> list[tuple[Any, Any]]:
        """(resource, span) for every span received so far."""
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        out = []
        with self.lock:
            bodies = list(self.bodies)
        for body in bodies:
            request = ExportTraceServiceRequest.FromString(body)
            for rs in request.resource_spans:
                for ss in rs.scope_spans:
                    out.extend((rs.resource, span) for span in ss.spans)
        return out

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def attributes(span: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in span.attributes:
        value = kv.value
        out[kv.key] = getattr(value, value.WhichOneof("value"))
    return out


def no_otel_env(tau: Tau) -> dict[str, str]:
    """Every OTEL_ variable of the test's environment left out (a developer's own)."""
    return {k: v for k, v in tau.env().items() if not k.startswith("OTEL_")}


def test_a_real_run_sends_its_trace_to_the_collector(tau: Tau, receiver: Receiver) -> None:
    require_module("opentelemetry.exporter.otlp.proto.http", NEED_EXTRA)
    tau(
        "server",
        "start",
        check=True,
        OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url,
        OTEL_BSP_SCHEDULE_DELAY="100",
    )
    tau(
        "run",
        "--wait",
        "--name",
        "traced",
        "--set",
        f"env.API_KEY={SECRET}",
        "--",
        "sh",
        "-c",
        "echo hi",
        check=True,
    )
    run_id = tau.json("status", "traced")["id"]
    deadline = time.monotonic() + 15
    while {s.name for _, s in receiver.spans()} < set(STAGES):
        assert time.monotonic() < deadline, [s.name for _, s in receiver.spans()]
        time.sleep(0.1)
    assert set(receiver.paths) == {"/v1/traces"}
    assert set(receiver.types) == {"application/x-protobuf"}
    got = receiver.spans()
    spans = {s.name: s for _, s in got}
    assert sorted(s.name for _, s in got) == sorted(STAGES)  # nothing else, each once
    resource = {kv.key: kv.value.string_value for kv in got[0][0].attributes}
    assert resource["service.name"] == "taugrid-server"
    root = spans["submit"]
    assert root.parent_span_id == b""
    for name in STAGES[1:]:
        assert spans[name].trace_id == root.trace_id
        assert spans[name].parent_span_id == root.span_id
    # The stages follow each other, ending where the run went RUNNING.
    for before, after in itertools.pairwise(STAGES[1:]):
        assert spans[before].end_time_unix_nano <= spans[after].start_time_unix_nano
        assert spans[before].start_time_unix_nano <= spans[before].end_time_unix_nano
    assert root.start_time_unix_nano <= spans["queued"].start_time_unix_nano
    assert spans["queued"].start_time_unix_nano <= root.end_time_unix_nano
    events = httpx.get(
        f"{tau.server_info()['url']}/api/v1/runs/{run_id}/events",
        headers={"Authorization": f"Bearer {tau.token()}"},
        timeout=10,
    ).json()
    running_at = next(e["at"] for e in events if e["to_state"] == "RUNNING")
    assert abs(spans["starting"].end_time_unix_nano / 1e9 - running_at) < 0.001
    said = attributes(root)
    assert said["http.route"] == "/api/v1/runs"
    assert said["http.request.method"] == "POST"
    assert said["http.response.status_code"] == 201
    assert said["taugrid.workspace"] == "default" and said["taugrid.queue"] == "default"
    assert said["taugrid.run_id"] == run_id
    assert attributes(spans["launch"])["taugrid.attempt"] == 0
    # Never the environment, the token, the command or the body.
    sent = b"".join(receiver.bodies)
    for private in (SECRET, "API_KEY", tau.token(), "echo hi"):
        assert private.encode() not in sent, private


def test_an_endpoint_without_the_extra_stops_the_start_in_one_line(
    tau: Tau, tmp_path: Path
) -> None:
    # The extra's modules made unfindable for the server, as where it is not installed.
    blocker = tmp_path / "no-otel-extra"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(
        "import sys\n"
        "class NoOtelExtra:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.startswith(('opentelemetry.sdk', 'opentelemetry.exporter')):\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "        return None\n"
        "sys.meta_path.insert(0, NoOtelExtra())\n"
    )
    proc = tau(
        "server",
        "start",
        OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9",
        PYTHONPATH=str(blocker),
    )
    assert proc.returncode != 0
    assert "pip install 'taugrid[otel]'" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tau.home / "server.json").exists()


def test_a_bad_endpoint_stops_the_start_in_one_line(tau: Tau) -> None:
    proc = tau("server", "start", TAU_OTEL_ENDPOINT="collector:4318")
    assert proc.returncode != 0
    assert "TAU_OTEL_ENDPOINT" in proc.stderr and "Traceback" not in proc.stderr


def imported(stderr: str) -> set[str]:
    """The modules a ``-X importtime`` trace shows imported."""
    return {
        line.rsplit("|", 1)[1].strip()
        for line in stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }


def otel_imports(stderr: str) -> set[str]:
    return {name for name in imported(stderr) if name.split(".")[0] == "opentelemetry"}


def test_without_an_endpoint_nothing_of_opentelemetry_is_imported(tau: Tau, tmp_path: Path) -> None:
    env = no_otel_env(tau)
    # FastAPI imports OpenTelemetry's API itself (its own, off, telemetry): that much is
    # FastAPI's, whatever TauGrid does.
    base = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import fastapi, starlette.testclient"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    fastapis = otel_imports(base.stderr)
    log = tmp_path / "server.log"
    with log.open("w") as out:
        server = subprocess.Popen(
            [sys.executable, "-X", "importtime", "-m", "taugrid.server", "--port", "0"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=out,
        )
    try:
        deadline = time.monotonic() + 30
        while not (tau.home / "server.json").exists():
            assert time.monotonic() < deadline and server.poll() is None, log.read_text()
            time.sleep(0.05)
        tau("run", "--wait", "--", "sh", "-c", "echo hi", check=True)
    finally:
        server.terminate()
        server.wait(timeout=20)
    trace = log.read_text()
    assert "taugrid.server.engine" in imported(trace)  # the import trace was read
    served = otel_imports(trace)
    assert served <= fastapis, sorted(served - fastapis)
    assert not {n for n in served if n.startswith(("opentelemetry.sdk", "opentelemetry.exporter"))}
    cli = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "taugrid.cli.main", "--help"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert otel_imports(cli.stderr) == set()  # the CLI: nothing of it at all
