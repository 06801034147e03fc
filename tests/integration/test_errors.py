"""Bad input and failure: one clear line, distinct exit codes, nothing half-created."""

from __future__ import annotations

import json
import socket
import sys

import httpx
from tauproc import Tau, write_spec

from taugrid import __version__
from taugrid.executors.local.executor import find_ray_cli
from taugrid.spec.modes import LOCAL, LOCAL_WITHOUT_RAY

# A local server offers launcher: ray where Ray is installed beside it (taugrid[ray]).
SERVER_CAPS = LOCAL if find_ray_cli(sys.executable) else LOCAL_WITHOUT_RAY


def _run_count(tau: Tau) -> int:
    return len(tau.json("list", "--limit", "1000")["runs"])


def test_invalid_specs_exit_2_with_positions_and_create_nothing(tau: Tau) -> None:
    tau.start_server()
    cases = {
        "syntax.yaml": "name: a\ncommand: [unclosed\n",
        "unknown.yaml": "name: a\ncomand: echo\n",
        "type.yaml": "name: a\ncommand: echo\nresources: {gpus: lots}\n",
        "name.yaml": "name: Bad_Name\ncommand: echo\n",
        "nocmd.yaml": "name: a\n",
        "workdir.yaml": "name: a\ncommand: echo\nworkdir: ./missing\n",
    }
    for fname, text in cases.items():
        write_spec(tau.cwd, text, fname)
    out = {f: tau("run", f) for f in cases}
    for fname, proc in out.items():
        assert proc.returncode == 2, (fname, proc.stderr)
        assert "Traceback" not in proc.stderr
        assert proc.stderr.startswith(f"{fname}:"), proc.stderr
    assert "unknown.yaml:2:1:" in out["unknown.yaml"].stderr
    assert "did you mean 'command'" in out["unknown.yaml"].stderr
    assert "type.yaml:3:" in out["type.yaml"].stderr
    assert "resources.gpus" in out["type.yaml"].stderr
    assert "workdir.yaml:3:10:" in out["workdir.yaml"].stderr
    assert "name.yaml:1:7: name:" in out["name.yaml"].stderr
    assert _run_count(tau) == 0
    assert not list(tau.home.glob("snapshots/*"))


def test_validate_reports_every_problem_and_inactive_fields(tau: Tau) -> None:
    write_spec(tau.cwd, "name: a\ncomand: echo\nnodes: 0\n", "two.yaml")
    proc = tau("validate", "two.yaml")
    assert proc.returncode == 2
    assert "two.yaml:2:1:" in proc.stderr and "two.yaml:3:" in proc.stderr
    write_spec(tau.cwd, "name: a\ncommand: echo\nimage: x/y:1\n", "ok.yaml")
    ok = tau("validate", "ok.yaml", check=True)
    assert "valid" in ok.stdout and "image" in ok.stdout
    assert not (tau.home / "server.json").exists()  # validate never needs a server


def test_validate_and_run_refuse_in_the_words_of_the_servers_mode(tau: Tau) -> None:
    write_spec(tau.cwd, "name: multi\ncommand: echo\nnodes: 9\nimage: x/y:1\n")
    said = "tau: nodes: 9: local mode runs at most 8 nodes, all on this one machine; more need"
    offline = tau("validate")  # no server: the local context is local mode
    assert offline.returncode == 2 and offline.stderr.startswith(said), offline.stderr
    assert offline.stderr.count("\n") == 1 and not (tau.home / "server.json").exists()
    far = tau("validate", TAU_SERVER_URL="http://127.0.0.1:1", TAU_TOKEN="x")
    assert far.returncode == 0 and "note: mode not checked" in far.stdout, far.stdout

    url = tau.start_server()["url"]
    answer = httpx.get(f"{url}/api/v1/server", headers={"Authorization": f"Bearer {tau.token()}"})
    assert answer.json() == {
        "mode": "local",
        "capabilities": SERVER_CAPS.to_dict(),
        "version": __version__,
    }
    assert httpx.get(f"{url}/api/v1/server").status_code == 401
    online = tau("validate")  # asks the running server
    refused = json.loads(tau("validate", "-o", "json").stdout)
    run = tau("run")  # the server's own refusal, from POST /runs/check
    assert run.returncode == online.returncode == 2
    assert run.stderr == online.stderr == offline.stderr
    assert refused["valid"] is False and refused["mode"] == "local"
    assert [f"tau: {m}\n" for m in refused["refused"]] == [run.stderr]
    write_spec(tau.cwd, "name: one\ncommand: echo\nimage: x/y:1\n", "one.yaml")
    ok = tau("run", "one.yaml", check=True)  # the notes come from the check's answer
    assert "note: image: x/y:1 has no effect in local mode" in ok.stderr
    assert _run_count(tau) == 1


def test_snapshot_too_large_names_biggest_paths(tau: Tau) -> None:
    proj = tau.cwd / "big"
    proj.mkdir()
    (proj / "weights.bin").write_bytes(b"\0" * 300_000)
    write_spec(proj, "name: big\ncommand: echo\n")
    proc = tau("run", cwd=proj, TAU_SNAPSHOT_LIMIT="100000")
    assert proc.returncode == 2
    assert "weights.bin" in proc.stderr and "Traceback" not in proc.stderr


def test_unreachable_server_wrong_token_not_found_ambiguous(tau: Tau) -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    down = tau("status", TAU_SERVER_URL=f"http://127.0.0.1:{port}", TAU_TOKEN="x")
    assert down.returncode == 3 and "cannot reach" in down.stderr
    assert down.stderr.count("\n") == 1

    info = tau.start_server()
    bad = tau("status", TAU_SERVER_URL=info["url"], TAU_TOKEN="wrong")
    assert bad.returncode == 4 and "token" in bad.stderr

    missing = tau("status", "no-such-run")
    assert missing.returncode == 5 and "no run matches 'no-such-run'" in missing.stderr

    for _ in range(2):
        tau("run", "--name", "twin", "--", "true", check=True)
    ids = [r["id"] for r in tau.json("list")["runs"]]
    common = "twin-"
    amb = tau("logs", common)
    assert amb.returncode == 6 and "matches several runs" in amb.stderr, (amb.stderr, ids)


def test_unschedulable_run_rejected_at_submit(tau: Tau) -> None:
    tau.start_server("--gpus", "2")
    proc = tau("run", "--gpus", "3", "--", "true")
    assert proc.returncode == 8 and "asks for 3 GPUs" in proc.stderr and "never" in proc.stderr
    assert _run_count(tau) == 0


def test_debug_shows_traceback(tau: Tau) -> None:
    proc = tau("--debug", "status", TAU_SERVER_URL="http://127.0.0.1:1", TAU_TOKEN="x")
    assert proc.returncode != 0 and "Traceback" in proc.stderr


def test_server_that_cannot_start_is_reported_in_one_line(tau: Tau) -> None:
    proc = tau("status", TAU_DATABASE_URL="postgresql+psycopg://nobody@127.0.0.1:1/none")
    assert proc.returncode == 3
    assert "failed to start" in proc.stderr and "server.log" in proc.stderr
    assert proc.stderr.count("\n") == 1


def test_timeout_stops_the_run_with_reason(tau: Tau) -> None:
    proc = tau(
        "run",
        "--wait",
        "--name",
        "slow",
        "--set",
        "timeout=1s",
        "--set",
        "stop_grace=1s",
        "--",
        "sleep",
        "30",
    )
    assert proc.returncode != 0
    data = tau.json("status", "slow")
    assert (data["state"], data["reason"]) == ("FAILED", "Timeout")
