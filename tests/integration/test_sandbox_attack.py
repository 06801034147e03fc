"""Issue 9: a workload on a shared server must not be able to act as the platform.

A researcher's run whose workload is an attacker script (run with this venv's python, so
the interpreter's exposure is exercised) tries to read the server's tokens, database,
secrets and another run's files, to look at the server process, to write outside its
run, to signal the server and to call the API with whatever it finds. On a shared server
(sandboxed) every attempt fails while its own directories work, its checkpoints resume
and its outputs are collected. The same script on a server with ``--isolation none``
(the behaviour before the sandbox) succeeds at the attacks: the test is not vacuous.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from tauproc import Tau, write_spec

import taugrid
from servicecheck import require_bwrap, require_checkout_readable_by_run_uids

POLICY = """\
flavors:
  - name: cpu
cluster_queues:
  - name: shared
    resources:
      - flavor: cpu
        quotas: {gpu: 0, cpu: 64, memory: 64Gi}
workspaces:
  - name: a
    local_queues: [{name: main, cluster_queue: shared}]
priority_classes:
  - {name: normal, value: 1000, default: true}
"""

ATTACK = r"""
import json, os, signal, sys, urllib.error, urllib.request

env = os.environ
out = env["TAU_OUTPUT_DIR"]
home = env["ATTACK_TAU_HOME"]
results, own, found = {}, {}, []


def attempt(name, fn):
    try:
        results[name] = {"ok": True, "got": repr(fn())[:300]}
    except Exception as exc:  # every way of failing counts as blocked
        results[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]}


def read(path):
    with open(path, "rb") as f:
        data = f.read(4096)
    found.extend(w for w in data.decode("utf-8", "replace").split() if len(w) > 20)
    return data[:60]


def listing(path, ignore=()):
    names = sorted(set(os.listdir(path)) - set(ignore))
    if not names:
        raise FileNotFoundError(f"nothing in {path}")
    return names


def secrets():
    values = []
    for top, _, files in os.walk(f"{home}/secrets"):
        values += [read(os.path.join(top, n)) for n in files]
    if not values:
        raise FileNotFoundError("no secret found")
    return values


def write(path):
    with open(path, "w") as f:
        f.write("owned\n")
    return path


def write_and_undo(path):  # where it worked (no sandbox), leave nothing behind
    write(path)
    os.unlink(path)
    return path


def whoami(token):
    req = urllib.request.Request(env["ATTACK_SERVER_URL"] + "/api/v1/whoami")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.load(resp).get("user")


def api_with_found_tokens():
    candidates = [v for v in env.values() if v.startswith("tau_") or len(v) >= 40]
    for word in [*found, *candidates]:
        try:
            return whoami(word.strip().strip('"'))
        except urllib.error.HTTPError:
            pass
    raise PermissionError(f"no token worked ({len(found) + len(candidates)} tried)")


if env["TAU_ATTEMPT"] == "0":
    attempt("read_token", lambda: read(f"{home}/token"))
    attempt("read_admin_token", lambda: read(f"{home}/admin-token"))
    attempt("read_db", lambda: read(f"{home}/tau.db"))
    attempt("read_secrets", secrets)
    attempt("list_tau_home", lambda: listing(home, ignore=("runs",)))
    attempt("other_run_output", lambda: read(env["ATTACK_VICTIM"] + "/outputs/victim.txt"))
    attempt("other_run_checkpoints", lambda: listing(env["ATTACK_VICTIM"] + "/checkpoints"))
    attempt_dir = os.path.dirname(env["TAU_METRICS_FILE"])
    attempt("own_launch_json", lambda: read(attempt_dir + "/launch.json"))
    attempt("server_environ", lambda: read(f"/proc/{env['ATTACK_SERVER_PID']}/environ"))
    attempt("server_root", lambda: listing(f"/proc/{env['ATTACK_SERVER_PID']}/root"))
    attempt("cli_config", lambda: read(env["ATTACK_CLI_CONFIG"]))
    attempt("write_source_tree", lambda: write_and_undo(env["ATTACK_SOURCE"] + "/evil.py"))
    attempt("write_etc", lambda: write_and_undo("/etc/tau-sandbox-evil"))
    attempt("signal_server", lambda: os.kill(int(env["ATTACK_SERVER_PID"]), 0))
    attempt("api_anonymous", lambda: whoami(None))
    attempt("api_with_found_tokens", api_with_found_tokens)

    own["uid"], own["gid"], own["groups"] = os.getuid(), os.getgid(), os.getgroups()
    own["env"] = dict(env)
    for where in (".", env["HOME"], out):
        write(os.path.join(where, "own-file.txt"))
    import taugrid

    own["sdk"] = taugrid.__file__
    with taugrid.checkpoint.saving(1) as d:
        (d / "weights.txt").write_text("w1\n")
    taugrid.log(1, loss=0.5)
    with open("result.txt", "w") as f:
        f.write("collected\n")
    with open(os.path.join(out, "attack.json"), "w") as f:
        json.dump({"results": results, "own": own}, f)
else:
    with open(os.path.join(out, "resume.json"), "w") as f:
        json.dump({"attempt": env["TAU_ATTEMPT"], "resume_from": env.get("TAU_RESUME_FROM")}, f)
"""

VICTIM = (
    "echo VICTIM-DATA > $TAU_OUTPUT_DIR/victim.txt; "
    "mkdir -p $TAU_CHECKPOINT_DIR/step-0000000007; echo x > $TAU_CHECKPOINT_DIR/step-0000000007/f"
)


def _ok(resp: httpx.Response) -> Any:
    assert resp.status_code < 300, (resp.status_code, resp.text)
    return resp.json() if resp.content else None


def _attacker_spec(tau: Tau, victim_dir: Path, server: dict[str, Any], shared: bool) -> None:
    where = "workspace: a\nqueue: main\n" if shared else ""
    env = {
        "ATTACK_TAU_HOME": str(tau.home),
        "ATTACK_VICTIM": str(victim_dir),
        "ATTACK_SERVER_PID": str(server["pid"]),
        "ATTACK_SERVER_URL": server["url"],
        "ATTACK_CLI_CONFIG": tau.env()["TAU_CONFIG"],
        "ATTACK_SOURCE": str(Path(taugrid.__file__).parent),
    }
    write_spec(
        tau.cwd / "attack",
        f"name: attacker\n{where}command: [{json.dumps(sys.executable)}, attack.py]\n"
        f"outputs: [result.txt]\nenv: {json.dumps(env)}\n",
    )
    (tau.cwd / "attack" / "attack.py").write_text(ATTACK)


def _run(tau: Tau, cwd: Path, **env: str) -> str:
    run = tau.json("run", cwd=cwd, **env)["run"]["id"]
    data = tau.wait_state(run, {"SUCCEEDED", "FAILED", "CANCELLED"}, timeout=60)
    assert data["state"] == "SUCCEEDED", (data["state"], tau("logs", run, **env).stdout)
    return str(run)


@pytest.fixture
def shared_server(tau: Tau) -> dict[str, Any]:
    require_bwrap()
    info = tau.start_server("--shared")
    admin_token = (tau.home / "admin-token").read_text().strip()
    with httpx.Client(
        base_url=f"{info['url']}/api/v1",
        headers={"Authorization": f"Bearer {admin_token}"},
        timeout=30,
    ) as admin:
        _ok(admin.put("/admin/policy", json={"source": "policy.yaml", "text": POLICY}))
        _ok(admin.post("/admin/workspaces", json={"name": "a"}))
        tokens = {}
        for user in ("res", "res2"):
            _ok(admin.post("/admin/users", json={"name": user}))
            _ok(admin.put(f"/admin/workspaces/a/members/{user}", json={"role": "researcher"}))
            tokens[user] = _ok(admin.post("/admin/tokens", json={"user": user}))["token"]
    return {**info, "tokens": tokens, "admin_token": admin_token}


def test_a_sandboxed_workload_cannot_take_over_a_shared_server(
    tau: Tau, shared_server: dict[str, Any]
) -> None:
    require_checkout_readable_by_run_uids()  # its workload runs this venv's Python
    url, tokens = shared_server["url"], shared_server["tokens"]
    as_res = {"TAU_SERVER": url, "TAU_TOKEN": tokens["res"]}
    as_res2 = {"TAU_SERVER": url, "TAU_TOKEN": tokens["res2"]}
    # Something worth stealing: a secret, another researcher's run, a CLI context.
    tau("secret", "set", "victim/key", "--workspace", "a", input_text="SECRET-VALUE", check=True)
    tau("login", url, "--token-env", "RES", "--name", "lab", RES=tokens["res"], check=True)
    assert Path(tau.env()["TAU_CONFIG"]).exists()
    spec = f"name: victim\nworkspace: a\nqueue: main\ncommand: {VICTIM!r}\n"
    write_spec(tau.cwd / "victim", spec)
    victim = _run(tau, tau.cwd / "victim", **as_res2)
    victim_dir = tau.home / "runs" / victim
    assert (victim_dir / "outputs" / "victim.txt").exists()

    _attacker_spec(tau, victim_dir, shared_server, shared=True)
    run = _run(tau, tau.cwd / "attack", **as_res)
    run_dir = tau.home / "runs" / run
    report = json.loads((run_dir / "outputs" / "attack.json").read_text())
    succeeded = {k: v for k, v in report["results"].items() if v["ok"]}
    assert not succeeded, succeeded
    assert len(report["results"]) == 16
    own = report["own"]

    # Nothing the workload received could call the API as anyone: no token anywhere.
    values = " ".join(own["env"].values())
    for token in (*tokens.values(), shared_server["admin_token"], tau.token()):
        assert token not in values
    assert own["env"]["HOME"] == str(run_dir / "home")
    assert own["sdk"].startswith(str(Path(taugrid.__file__).parent))  # the SDK imported

    # It ran as its run's own uid when the server is root; its files are that uid's.
    if os.geteuid() == 0:
        uid = own["uid"]
        assert uid >= 2_000_000 and own["gid"] == uid and own["groups"] in ([], [uid])
        for path in ("outputs/own-file.txt", "home/own-file.txt", "checkpoints", "outputs"):
            assert (run_dir / path).stat().st_uid == uid, path
        assert (run_dir / "attempts" / "0" / "metrics.jsonl").stat().st_uid == uid
    assert (run_dir / "home" / "own-file.txt").exists()

    # Outputs are collected; metrics and checkpoints are seen by the server.
    with httpx.Client(
        base_url=f"{url}/api/v1", headers={"Authorization": f"Bearer {tokens['res']}"}
    ) as api:
        names = {a["path"] for a in _ok(api.get(f"/runs/{run}/artifacts"))["artifacts"]}
        assert {"result.txt", "attack.json", "own-file.txt"} <= names
        assert api.get(f"/runs/{run}/artifacts/result.txt").text == "collected\n"
        steps = [c["step"] for c in _ok(api.get(f"/runs/{run}/checkpoints"))["checkpoints"]]
        assert steps == [1]
        # A second attempt resumes from the checkpoint the sandboxed workload wrote.
        _ok(api.post(f"/runs/{run}/resume", headers={"Idempotency-Key": str(uuid.uuid4())}))
    tau.wait_state(run, {"SUCCEEDED", "FAILED"}, timeout=60)
    resumed = json.loads((run_dir / "outputs" / "resume.json").read_text())
    assert resumed == {
        "attempt": "1",
        "resume_from": str(run_dir / "checkpoints" / "step-0000000001"),
    }
    assert not (Path(taugrid.__file__).parent / "evil.py").exists()
    assert not Path("/etc/tau-sandbox-evil").exists()


def test_without_a_sandbox_the_same_workload_takes_over(tau: Tau) -> None:
    """``--isolation none`` (the local default, and what every server did before): the
    attacks above succeed, which is why a shared server refuses to run so."""
    server = tau.start_server("--isolation", "none")
    Path(tau.env()["TAU_CONFIG"]).write_text(
        "contexts:\n  - name: lab\n    server: https://lab.invalid\n    token: tau_x_y\n"
    )
    write_spec(tau.cwd / "victim", f"name: victim\ncommand: {VICTIM!r}\n")
    victim = _run(tau, tau.cwd / "victim")
    _attacker_spec(tau, tau.home / "runs" / victim, server, shared=False)
    run = _run(tau, tau.cwd / "attack")
    report = json.loads((tau.home / "runs" / run / "outputs" / "attack.json").read_text())
    took = {k for k, v in report["results"].items() if v["ok"]}
    want = {
        "read_token",
        "read_db",
        "list_tau_home",
        "other_run_output",
        "other_run_checkpoints",
        "own_launch_json",
        "server_environ",
        "server_root",
        "cli_config",
        "write_source_tree",
        "write_etc",
        "signal_server",
        "api_with_found_tokens",
    }
    assert want <= took, report["results"]
