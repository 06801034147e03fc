"""Submit limits against a real server: each one a clear error with the field and the
limit, never the value, and nothing recorded."""

from __future__ import annotations

import hashlib
import io
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tauproc import Tau, write_spec

from taugrid.domain.fingerprint import spec_hash

MARK = "MARKER-VALUE"  # put into every bad value: no answer may contain it
MiB = 1 << 20


class Server:
    def __init__(self, tau: Tau) -> None:
        self.tau = tau
        info = tau.start_server()
        self.api = httpx.Client(
            base_url=f"{info['url']}/api/v1",
            headers={"Authorization": f"Bearer {tau.token()}"},
            timeout=60,
        )
        raw = io.BytesIO()
        with tarfile.open(fileobj=raw, mode="w:gz") as tar:
            member = tarfile.TarInfo("job.py")
            member.size = 9
            tar.addfile(member, io.BytesIO(b"print(1)\n"))
        self.digest = hashlib.sha256(raw.getvalue()).hexdigest()
        assert self.api.put(f"/snapshots/{self.digest}", content=raw.getvalue()).status_code == 201

    def body(self, **resolved: Any) -> dict[str, Any]:
        spec = {"name": "job", "command": ["python3", "job.py"], **resolved}
        return {
            "spec_source": "tau.yaml",
            "file_text": "command: [python3, job.py]\n",
            "resolved": spec,
            "spec_hash": spec_hash(spec),  # as the CLI sends it
            "snapshot_digest": self.digest,
        }

    def submit(self, body: dict[str, Any], key: str | None = None) -> httpx.Response:
        return self.api.post(
            "/runs", json=body, headers={"Idempotency-Key": key or str(uuid.uuid4())}
        )

    def runs(self) -> int:
        return len(self.api.get("/runs").json()["runs"])


@pytest.fixture
def server(tau: Tau) -> Iterator[Server]:
    s = Server(tau)
    try:
        yield s
    finally:
        s.api.close()


def _problems(resp: httpx.Response) -> dict[str, str]:
    assert resp.status_code == 422, resp.text
    assert MARK not in resp.text
    err = resp.json()["error"]
    assert err["code"] == "spec_invalid"
    return {p["field"]: p["message"] for p in err["problems"]}


def test_each_submit_limit_is_a_clear_error_and_records_nothing(server: Server) -> None:
    cases: list[tuple[dict[str, Any], str, str]] = [
        (server.body(outputs=[f"model/{MARK}\0.pt"]), "outputs[0]", "control character (NUL)"),
        (server.body(command=["python3", f"{MARK}" * (MiB // len(MARK) * 5)]), "command", "MiB"),
        (server.body(env={f"K{i}": MARK for i in range(20_000)}), "env", "20000 variables"),
        (server.body(env={"BIG": MARK * 20_000}), "env.BIG", "KiB"),
        (server.body(workdir=f"{MARK}\x1b[2J"), "workdir", "control character"),
        (
            server.body(experiment={"name": "e", "tags": {"t": f"{MARK}\0"}}),
            "experiment.tags.t",
            "",
        ),
        ({**server.body(), "file_text": MARK * (2 * MiB // len(MARK))}, "request.file_text", "MiB"),
        ({**server.body(), "overrides": [f"env.X={MARK}\0"]}, "request.overrides[0]", "NUL"),
        ({**server.body(), "env": {"PATH": f"/bin:{MARK}\0"}}, "request.env.PATH", "NUL"),
        ({**server.body(), "spec_hash": "0" * 64}, "request.spec_hash", "sha256"),
    ]
    for body, field, said in cases:
        problems = _problems(server.submit(body))
        assert field in problems, (field, problems)
        assert said in problems[field], (field, problems)
    assert server.runs() == 0

    # A batch names the item; one bad item and nothing of the batch is recorded.
    items = [
        {**server.body(), "idempotency_key": "k-1"},
        {**server.body(outputs=[f"{MARK}\0"]), "idempotency_key": "k-2"},
    ]
    problems = _problems(server.api.post("/runs/batch", json={"runs": items}))
    assert "runs[1].outputs[0]" in problems
    assert server.runs() == 0

    # The spec_hash the CLI sends is checked; a matching one (or none) is accepted, and
    # the run records the server's own hash of what it records (the queue filled in).
    body = server.body()
    ok = server.submit(body)
    assert ok.status_code == 201, ok.text
    recorded = spec_hash({**body["resolved"], "queue": "default"})
    assert ok.json()["run"]["spec_hash"] == recorded
    without = server.submit({k: v for k, v in body.items() if k != "spec_hash"})
    assert without.json()["run"]["spec_hash"] == recorded


def test_bodies_over_the_http_limit_are_refused_before_parsing(server: Server) -> None:
    huge = {**server.body(), "file_text": MARK * (30 * MiB // len(MARK))}  # 30 MB spec text
    resp = server.submit(huge)
    assert resp.status_code == 413, resp.text[:300]
    assert resp.json()["error"]["code"] == "request_too_large" and MARK not in resp.text
    items = [{**server.body(), "file_text": MARK * (MiB // len(MARK))} for _ in range(40)]
    resp = server.api.post("/runs/batch", json={"runs": items})  # 40 MB
    assert resp.status_code == 413 and resp.json()["error"]["code"] == "request_too_large"
    assert server.runs() == 0


def test_bad_idempotency_keys_are_usage_errors(server: Server) -> None:
    for key in (b"k" * 129, b"has space", "caf\u00e9".encode("latin-1"), b"tab\tkey"):
        resp = server.api.post("/runs", json=server.body(), headers={"Idempotency-Key": key})
        assert resp.status_code == 400 and resp.json()["error"]["code"] == "usage", resp.text
    assert server.runs() == 0


def test_the_cli_refuses_before_archiving_or_uploading(tau: Tau) -> None:
    tau.start_server()
    proj = tau.cwd / "proj"
    write_spec(proj, f'name: job\ncommand: [python3, job.py]\noutputs: ["{MARK}\\0.pt"]\n')
    proc = tau("run", cwd=proj)
    assert proc.returncode == 2, proc.stderr
    assert "outputs[0]: contains a control character (NUL)" in proc.stderr
    assert MARK not in proc.stderr and "Traceback" not in proc.stderr
    assert not list(Path(tau.home / "snapshots").glob("*"))  # nothing was uploaded
    assert not (tau.home / "cache" / "snapshots").exists()  # nor even archived


def test_nothing_a_submission_says_breaks_a_postgresql_column(tau: Tau, postgres_url: str) -> None:
    # PostgreSQL, unlike SQLite, refuses a NUL in text and a string longer than its
    # column: without the limits these were 500s, some after the run was committed.
    tau.extra_env["TAU_DATABASE_URL"] = postgres_url
    server = Server(tau)
    try:
        bodies = [
            server.body(workspace="w" * 100),
            server.body(workspace="a\0b"),
            server.body(outputs=["out\0"]),
            server.body(experiment={"name": "e" * 300}),
            {**server.body(), "file_text": "command: x\0\n"},
            {**server.body(), "spec_source": "tau\0.yaml"},
            {**server.body(), "submitter": "s" * 300},
        ]
        for body in bodies:
            resp = server.submit(body)
            assert resp.status_code in (400, 422), resp.text
        batch = [{**b, "idempotency_key": str(uuid.uuid4())} for b in bodies[:2]]
        assert server.api.post("/runs/batch", json={"runs": batch}).status_code == 422
        resp = server.api.put(
            f"/snapshots/{server.digest}", params={"workspace": "w" * 100}, content=b"x"
        )
        assert resp.status_code == 400, resp.text
        assert server.runs() == 0
        assert server.submit(server.body()).status_code == 201  # and the server is fine
    finally:
        server.api.close()
