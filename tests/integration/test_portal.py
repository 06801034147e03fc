"""The portal over HTTP against a real server and real runs: how a browser logs in, what
every page carries, CSRF on every change (the API's cookie path too), actions carried
out by the run service with the API's answers, and nobody seeing another workspace.
(The browser itself drives the pages in tests/e2e/test_portal_browser.py.)"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from tauproc import Tau, write_spec

from servicecheck import require_bwrap

CSRF = re.compile(r'name="csrf" value="([0-9a-f]+)"')


@contextmanager
def portal(tau: Tau, **env: str) -> Iterator[tuple[httpx.Client, str]]:
    """A browser-like client logged in through ``tau portal --url``; its CSRF token."""
    link = tau("portal", "--url", check=True, **env).stdout.strip()
    with httpx.Client(follow_redirects=True, timeout=30) as client:
        page = client.get(link)
        assert page.status_code == 200, page.text
        found = CSRF.search(page.text)
        assert found, "the page carries the session's CSRF token"
        yield client, found.group(1)


def base_of(tau: Tau) -> str:
    return str(tau.server_info()["url"])


def submit(tau: Tau, name: str, *cmd: str, **env: str) -> str:
    out = tau.json("run", "--name", name, "--", *cmd, **env)
    return str(out["run"]["id"] if "run" in out else out["id"])


@pytest.fixture
def local(tau: Tau) -> Iterator[Tau]:
    tau.start_server()
    try:
        yield tau
    finally:
        tau.stop_server()


def test_a_login_link_works_once_and_sets_a_locked_down_cookie(local: Tau) -> None:
    link = local("portal", "--url", check=True).stdout.strip()
    assert link.startswith(base_of(local) + "/portal/login?ticket=")
    first = httpx.get(link, timeout=30)
    assert first.status_code == 303 and first.headers["location"] == "/portal/"
    cookie = first.headers["set-cookie"]
    assert cookie.startswith("tau_session=taulocal.")
    assert "HttpOnly" in cookie and "SameSite=lax" in cookie
    assert "Secure" not in cookie  # loopback: plain http is fine on the same machine
    again = httpx.get(link, timeout=30)
    assert again.status_code == 401 and "already used" in again.text
    assert "set-cookie" not in again.headers


def test_pages_need_a_session_and_carry_the_security_headers(local: Tau) -> None:
    base = base_of(local)
    bare = httpx.get(f"{base}/portal/runs?state=FAILED", timeout=30)
    assert bare.status_code == 401 and "tau portal" in bare.text
    assert "next=/portal/runs" in bare.text or "Log in" in bare.text
    htmx = httpx.get(f"{base}/portal/runs/rows", headers={"HX-Request": "true"}, timeout=30)
    assert htmx.status_code == 401 and htmx.headers["hx-redirect"].startswith("/portal/login")
    forged = httpx.get(
        f"{base}/portal/", cookies={"tau_session": "taulocal.9999999999." + "0" * 64}, timeout=30
    )
    assert forged.status_code == 401
    root = httpx.get(f"{base}/", timeout=30)
    assert root.status_code == 302 and root.headers["location"] == "/portal/"

    with portal(local) as (client, _):
        for path in ("/portal/", "/portal/runs", "/portal/queues", "/portal/gpus"):
            page = client.get(f"{base}{path}")
            assert page.status_code == 200, path
            csp = page.headers["content-security-policy"]
            assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
            assert page.headers["x-frame-options"] == "DENY"
            assert page.headers["cache-control"] == "no-store"
        assert "No GPU known" in client.get(f"{base}/portal/gpus").text

    # Health off: the page shows what the inventory knows and says so, never a green.
    local.stop_server()
    base = str(local.start_server("--health", "off", "--gpus", "2")["url"])
    with portal(local) as (client, _):
        gpus = client.get(f"{base}/portal/gpus").text
        overview = client.get(f"{base}/portal/").text
    assert "Health monitoring is off" in gpus and "Health monitoring is off" in overview
    assert gpus.count("? unknown") == 2 and "healthy" not in gpus


def test_changes_need_the_csrf_token_on_the_portal_and_on_the_api(local: Tau) -> None:
    base = base_of(local)
    run = submit(local, "sleeper", "sleep", "300")
    with portal(local) as (client, csrf):
        for bad in ({}, {"csrf": "0" * 40}):
            refused = client.post(f"{base}/portal/runs/{run}/cancel", data=bad)
            assert refused.status_code == 403 and "CSRF" in refused.text
        # The cookie also authenticates the API (downloads): a change there needs it too.
        api = client.post(f"{base}/api/v1/runs/{run}/cancel")
        assert api.status_code == 403 and api.json()["error"]["code"] == "forbidden"
        assert local.json("status", run)["state"] not in {"CANCELLED"}
        assert client.get(f"{base}/api/v1/runs/{run}").status_code == 200  # reads need none

        done = client.post(f"{base}/portal/runs/{run}/cancel", data={"csrf": csrf})
        assert done.status_code == 200 and str(done.url).endswith(f"/portal/runs/{run}")
        local.wait_state(run, {"CANCELLED"}, timeout=60)
        audit = local.json("admin", "audit", "--action", "run.cancel")
        assert any(e["target"] == run and e["outcome"] == "ok" for e in _entries(audit))


def _entries(audit: Any) -> list[dict[str, Any]]:
    return list(audit["entries"] if isinstance(audit, dict) else audit)


def test_rerun_from_the_page_takes_overrides_and_refuses_bad_ones_whole(local: Tau) -> None:
    base = base_of(local)
    spec_dir = local.cwd / "exp"
    write_spec(
        spec_dir,
        "name: train\ncommand: [python, -c, 'import os; print(os.environ[\"LR\"])']\n"
        "env: {LR: '0.1'}\n",
    )
    out = local.json("run", "--wait", cwd=spec_dir)
    first = str(out["run"]["id"] if "run" in out else out["id"])
    with portal(local) as (client, csrf):
        before = len(local.json("list")["runs"])
        bad = client.post(
            f"{base}/portal/runs/{first}/rerun",
            data={"csrf": csrf, "overrides": "resources.gpu=lots"},
        )
        assert bad.status_code == 422 and "resources.gpu" in bad.text
        assert len(local.json("list")["runs"]) == before  # nothing half-created

        form = {"csrf": csrf, "overrides": "--set env.LR=0.5\n", "idempotency_key": "k1"}
        made = client.post(f"{base}/portal/runs/{first}/rerun", data=form)
        assert made.status_code == 200
        again = client.post(f"{base}/portal/runs/{first}/rerun", data=form)  # a double click
        assert again.url == made.url
        second = str(made.url).rsplit("/", 1)[1]
        assert second != first
        final = local.wait_state(second, {"SUCCEEDED", "FAILED"}, timeout=60)
        assert final["state"] == "SUCCEEDED" and final["rerun_of"] == first
        assert final["spec"]["overrides"] == ["env.LR=0.5"]
        logs = local("logs", second, check=True).stdout
        assert "0.5" in logs
        diff = client.get(f"{base}/portal/diff", params={"a": first, "b": second}).text
        assert "env.LR" in diff and "0.5" in diff


def test_search_and_filters_read_the_same_runs_as_the_api(local: Tau) -> None:
    base = base_of(local)
    alpha = submit(local, "alpha-100", "true")
    beta = submit(local, "beta", "true")
    for run in (alpha, beta):
        local.wait_state(run, {"SUCCEEDED"}, timeout=60)
    with portal(local) as (client, _):
        found = client.get(f"{base}/portal/runs", params={"q": "HA-1"}).text
        assert alpha in found and beta not in found
        wild = client.get(f"{base}/portal/runs", params={"q": "%"}).text  # literal, no wildcard
        assert alpha not in wild and beta not in wild and "No run matches" in wild
        rows = client.get(f"{base}/portal/runs/rows", params={"state": "FAILED"}).text
        assert alpha not in rows and "No run matches" in rows
        page = client.get(f"{base}/portal/runs/{alpha}").text
        assert "SUCCEEDED" in page and "Resume from checkpoint" in page  # the owner may


def test_the_change_stream_tells_of_a_run_that_moves(local: Tau) -> None:
    base = base_of(local)
    with (
        portal(local) as (client, _),
        client.stream("GET", f"{base}/portal/stream/changes") as stream,
    ):
        lines = stream.iter_lines()
        assert next(lines) == ": connected"
        run = submit(local, "mover", "true")
        deadline = time.monotonic() + 30
        seen = ""
        for line in lines:
            if line.startswith("data:") and run in line:
                seen = line
                break
            assert time.monotonic() < deadline
        assert seen == f"data: {run}" or run in seen


# -- a shared server: roles and workspaces ------------------------------------------------


def _api(base: str, token: str) -> httpx.Client:
    return httpx.Client(
        base_url=f"{base}/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=30
    )


def test_on_a_shared_server_the_portal_shows_only_ones_workspaces(tau: Tau) -> None:
    require_bwrap()
    info = tau.start_server("--shared")
    base = str(info["url"])
    admin_token = (tau.home / "admin-token").read_text().strip()
    tokens: dict[str, str] = {}
    try:
        with _api(base, admin_token) as admin:
            for ws in ("a", "b"):
                assert admin.post("/admin/workspaces", json={"name": ws}).status_code < 300
            for user, ws, role in (("ann", "a", "researcher"), ("bob", "b", "researcher")):
                assert admin.post("/admin/users", json={"name": user}).status_code < 300
                put = admin.put(f"/admin/workspaces/{ws}/members/{user}", json={"role": role})
                assert put.status_code < 300
                tokens[user] = admin.post("/admin/tokens", json={"user": user}).json()["token"]
        env = {user: {"TAU_SERVER": base, "TAU_TOKEN": t} for user, t in tokens.items()}
        spec = tau.cwd / "bob"
        write_spec(spec, "name: secret-plan\ncommand: [sleep, '60']\nworkspace: b\n")
        bobs = str(tau.json("run", cwd=spec, **env["bob"])["run"]["id"])

        with portal(tau, **env["ann"]) as (client, csrf):
            listed = client.get(f"{base}/portal/runs", params={"q": "secret"}).text
            assert bobs not in listed and "secret-plan" not in listed
            hidden = client.get(f"{base}/portal/runs/{bobs}")
            with _api(base, tokens["ann"]) as ann:
                api = ann.get(f"/runs/{bobs}")
                assert hidden.status_code == api.status_code == 404
                assert api.json()["error"]["code"] in hidden.text
                forged = client.post(f"{base}/portal/runs/{bobs}/cancel", data={"csrf": csrf})
                api_cancel = ann.post(f"/runs/{bobs}/cancel")
            assert forged.status_code == api_cancel.status_code == 404
            assert client.get(f"{base}/portal/experiments").status_code == 200
            session = client.cookies["tau_session"]
            assert session.startswith("tau_")  # a revocable API token of ann's own
            out = client.post(f"{base}/portal/logout", data={"csrf": csrf})
            assert out.status_code == 200
        # Logging out revokes the session's token: the old cookie is dead.
        dead = httpx.get(f"{base}/portal/", cookies={"tau_session": session}, timeout=30)
        assert dead.status_code == 401
        assert tau.json("status", bobs, **env["bob"])["state"] != "CANCELLED"
        feed = httpx.get(
            f"{base}/api/v1/events", headers={"Authorization": f"Bearer {tokens['ann']}"}
        ).json()
        assert all(e["run_id"] != bobs for e in feed["events"])
        assert json.dumps(feed).find("secret-plan") == -1
    finally:
        tau.stop_server()


def test_the_gpu_page_shows_a_quarantined_gpu_why_and_the_event(tau: Tau) -> None:
    base = str(tau.start_server("--gpus", "2")["url"])  # health on: the default
    try:
        tau("admin", "health", "inject", "--gpu", "1", "--xid", "79", check=True)
        with portal(tau) as (client, _):
            page = client.get(f"{base}/portal/gpus").text
            overview = client.get(f"{base}/portal/").text
        assert "✗ quarantined" in page and "✓ healthy" in page
        assert "Xid 79" in page  # the admin's event list
        assert "1 out of service" in overview and "Health monitoring is off" not in overview
    finally:
        tau.stop_server()


def test_tau_portal_prints_the_address_and_opens_a_login_link(local: Tau) -> None:
    opened = local.cwd / "opened.txt"
    opener = local.cwd / "browser.sh"
    opener.write_text(f'#!/bin/sh\necho "$1" > {opened}\n')
    opener.chmod(0o755)
    out = local("portal", check=True, BROWSER=str(opener)).stdout
    assert out.strip() == f"TauGrid portal: {base_of(local)}/portal/"
    link = opened.read_text().strip()
    assert "/portal/login?ticket=" in link and link not in out  # the secret link: not printed
    assert httpx.get(link, timeout=30).status_code == 303


def test_a_run_page_shows_metrics_checkpoints_artifacts_and_the_code_record(local: Tau) -> None:
    base = base_of(local)
    script = (
        "import os, taugrid\n"
        "for step in range(4):\n"
        "    taugrid.log(step=step, loss=1.0 / (step + 1))\n"
        "with taugrid.checkpoint.saving(3) as d:\n"
        "    (d / 'weights.bin').write_bytes(b'w' * 10)\n"
        "open(os.path.join(os.environ['TAU_OUTPUT_DIR'], 'report <1>.txt'), 'w').write('ok')\n"
    )
    (local.cwd / "train.py").write_text(script)
    out = local.json("run", "--name", "record", "--wait", "--", sys.executable, "train.py")
    run = str(out["run"]["id"] if "run" in out else out["id"])
    with portal(local) as (client, _):
        page = client.get(f"{base}/portal/runs/{run}").text
        assert 'data-metric="loss"' in page and "4 points logged" in page
        assert "✓ verified" in page and "step-0000000003" in page
        link = f"/api/v1/runs/{run}/artifacts/report%20%3C1%3E.txt"
        assert f'href="{link}"' in page and "report &lt;1&gt;.txt" in page
        assert client.get(f"{base}{link}").text == "ok"  # the API's download, by cookie
        assert '<h2 id="h-code">Code</h2>' in page and "Snapshot" in page
        assert "Resolved" in page and "train.py" in page


def test_an_experiment_page_compares_its_runs_and_overlays_their_charts(local: Tau) -> None:
    base = base_of(local)
    spec_dir = local.cwd / "sweep"
    (spec_dir / "train.py").parent.mkdir(parents=True, exist_ok=True)
    (spec_dir / "train.py").write_text(
        "import os, taugrid\n"
        "lr = float(os.environ['LR'])\n"
        "for step in range(5):\n"
        "    taugrid.log(step=step, loss=lr * (5 - step), acc=step / 5)\n"
    )
    write_spec(
        spec_dir,
        f"name: sweep\ncommand: [{sys.executable}, train.py]\nenv: {{LR: '1'}}\n"
        "experiment: {name: lr-sweep, tags: {kind: test}}\n",
    )
    ids = []
    for lr in ("1", "2", "3"):
        out = local.json("run", "--wait", "--set", f"env.LR={lr}", cwd=spec_dir)
        ids.append(str(out["run"]["id"] if "run" in out else out["id"]))
    with portal(local) as (client, _):
        listing = client.get(f"{base}/portal/experiments").text
        assert "lr-sweep" in listing
        page = client.get(f"{base}/portal/experiments/lr-sweep", params={"metric": "loss"}).text
        assert all(i in page for i in ids) and "kind=test" in page
        chart = page[page.index('data-metric="loss"') :]
        chart = chart[: chart.index("</figure>")]
        assert chart.count("<polyline") == 3  # one line per run, overlaid
        assert "acc" in page  # offered to choose, not charted unless asked
        assert 'data-metric="acc"' not in page
        missing = client.get(f"{base}/portal/experiments/none-such")
        assert missing.status_code == 404 and "not_found" in missing.text
