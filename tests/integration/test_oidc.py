"""OIDC login against oidc-provider-mock on loopback: the CLI's device flow, the portal's
session cookie, and the refusals (state mismatch, unknown device code, OIDC off)."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tauproc import TAU, Tau

from servicecheck import require_bwrap, require_module, require_service

ALICE = {"email": "alice@example.org", "groups": ["tau:a:researcher", "tau:nowhere:admin"]}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def issuer() -> Iterator[str]:
    """The mock provider in a subprocess on a free loopback port."""
    require_module(
        "oidc_provider_mock", "oidc-provider-mock is not installed (pip install -e '.[dev]')"
    )
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-W", "ignore", "-m", "oidc_provider_mock", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(f"{url}/.well-known/openid-configuration").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                err = proc.stderr.read() if proc.stderr and proc.poll() is not None else ""
                require_service(False, f"oidc-provider-mock did not start: {err[-500:]}")
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr:
            proc.stderr.close()


class Lab:
    def __init__(self, tau: Tau, issuer: str, tmp_path: Path) -> None:
        secret = tmp_path / "oidc-secret"
        require_bwrap()
        secret.write_text("s3cret\n")
        secret.chmod(0o600)
        info = tau.start_server(
            "--shared",
            "--oidc-issuer",
            issuer,
            "--oidc-client-id",
            "taugrid",
            "--oidc-client-secret-file",
            str(secret),
        )
        self.tau = tau
        self.issuer = issuer
        self.url: str = info["url"]
        admin = (tau.home / "admin-token").read_text().strip()
        self.admin = httpx.Client(
            base_url=f"{self.url}/api/v1", headers={"Authorization": f"Bearer {admin}"}
        )
        assert self.admin.post("/admin/workspaces", json={"name": "a"}).status_code == 201
        r = httpx.put(f"{issuer}/users/alice", json=ALICE)
        assert r.status_code == 204, r.text

    def users(self) -> list[str]:
        return [u["name"] for u in self.admin.get("/admin/users").json()["users"]]

    def audit(self) -> list[dict[str, Any]]:
        entries: list[dict[str, Any]] = self.admin.get(
            "/admin/audit", params={"action": "auth.login"}
        ).json()["entries"]
        return entries


@pytest.fixture
def lab(tau: Tau, issuer: str, tmp_path: Path) -> Iterator[Lab]:
    world = Lab(tau, issuer, tmp_path)
    try:
        yield world
    finally:
        world.admin.close()


def _to_provider(browser: httpx.Client, start: str) -> str:
    """Follow TauGrid's redirect to the provider's authorization form; its URL."""
    r = browser.get(start)
    assert r.status_code == 302, r.text
    auth = r.headers["location"]
    assert "code_challenge_method=S256" in auth and "state=" in auth and "nonce=" in auth
    form = browser.get(auth)
    assert form.status_code == 200 and 'name="sub"' in form.text
    return auth


def _sign_in(browser: httpx.Client, auth: str, sub: str) -> str:
    """Submit the mock's form as ``sub``: the callback URL it redirects to."""
    r = browser.post(auth, data={"sub": sub})
    assert r.status_code == 302, r.text
    callback: str = r.headers["location"]
    return callback


def test_cli_device_login(lab: Lab) -> None:
    tau = lab.tau
    proc = subprocess.Popen(
        [*TAU, "login", lab.url, "--oidc", "--name", "lab"],
        cwd=tau.cwd,
        env=tau.env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        m = re.match(r"Open (\S+) and sign in \(code ([A-Z]{4}-[A-Z]{4})\)", line)
        assert m, line
        assert m.group(1).startswith(f"{lab.url}/auth/device?user_code=")
        with httpx.Client(timeout=30) as browser:
            callback = _sign_in(browser, _to_provider(browser, m.group(1)), "alice")
            assert callback.startswith(f"{lab.url}/auth/callback?")
            page = browser.get(callback)
            assert page.status_code == 200, page.text
            assert "Logged in as alice@example.org" in page.text
            # The code is used up: the page no longer sends anyone to the provider.
            again = browser.get(m.group(1))
            assert again.status_code == 400 and "unknown" in again.text.lower()
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "as alice@example.org (context lab)" in out
    assert tau("--context", "lab", "status").returncode == 0
    shown = tau.json("--context", "lab", "context", "show")
    identity = shown["identity"]
    assert identity["user"] == "alice@example.org"
    assert identity["memberships"] == {"a": "researcher"}  # tau:nowhere:* is ignored
    assert identity["admin"] is False
    logins = lab.audit()
    assert logins[0]["actor"] == "alice@example.org" and logins[0]["outcome"] == "ok"
    assert logins[0]["target"] == "device"
    # The device code was consumed with the token.
    config = (tau.home.parent / "tau-config.yaml").read_text()
    assert "tau_" in config


def test_groups_are_resynced_at_each_login(lab: Lab) -> None:
    for groups, want_admin, want in (
        (["tau:a:viewer", "tau:a:maintainer"], False, {"a": "maintainer"}),
        (["tau:admin"], True, {}),
    ):
        httpx.put(f"{lab.issuer}/users/alice", json={**ALICE, "groups": groups})
        with httpx.Client(timeout=30) as browser:
            callback = _sign_in(browser, _to_provider(browser, f"{lab.url}/auth/login"), "alice")
            assert browser.get(callback).status_code == 302
        user = next(
            u for u in lab.admin.get("/admin/users").json()["users"] if u["name"] == ALICE["email"]
        )
        assert user["admin"] is want_admin and user["memberships"] == want


def test_portal_login_sets_session_cookie(lab: Lab) -> None:
    with httpx.Client(timeout=30) as browser:
        auth = _to_provider(browser, f"{lab.url}/auth/login?next=/runs")
        r = browser.get(_sign_in(browser, auth, "alice"))
        assert r.status_code == 302 and r.headers["location"] == "/runs"
        cookie = r.headers["set-cookie"]
        assert "tau_session=" in cookie and "HttpOnly" in cookie
        assert "samesite=lax" in cookie.lower()
        session = r.cookies["tau_session"]
    who = httpx.get(f"{lab.url}/api/v1/whoami", cookies={"tau_session": session})
    assert who.status_code == 200, who.text
    assert who.json()["user"] == "alice@example.org"
    assert who.json()["memberships"] == {"a": "researcher"}
    bad = httpx.get(f"{lab.url}/api/v1/whoami", cookies={"tau_session": "tau_nope_nope"})
    assert bad.status_code == 401
    # Only paths on this server are redirect targets.
    with httpx.Client(timeout=30) as browser:
        auth = _to_provider(browser, f"{lab.url}/auth/login?next=//evil.example/")
        r = browser.get(_sign_in(browser, auth, "alice"))
        assert r.status_code == 302 and r.headers["location"] == "/"


def test_state_mismatch_is_refused(lab: Lab) -> None:
    with httpx.Client(timeout=30) as browser:
        callback = _sign_in(browser, _to_provider(browser, f"{lab.url}/auth/login"), "alice")
        forged = re.sub(r"state=[^&]+", "state=forged", callback)
        r = browser.get(forged)
        assert r.status_code == 400
    assert ALICE["email"] not in lab.users()
    assert lab.audit()[0]["outcome"] == "bad_state"


def test_device_token_errors(lab: Lab) -> None:
    api = f"{lab.url}/api/v1/auth"
    r = httpx.post(f"{api}/device/token", json={"device_code": "nope"})
    assert r.status_code == 400
    assert r.json()["error"]["code"] in ("expired_token", "invalid_grant")
    dev = httpx.post(f"{api}/device").json()
    assert re.fullmatch(r"[A-Z]{4}-[A-Z]{4}", dev["user_code"])
    assert dev["interval"] == 1 and dev["expires_in"] == 600
    assert dev["verification_uri"] == f"{lab.url}/auth/device"
    r = httpx.post(f"{api}/device/token", json={"device_code": dev["device_code"]})
    assert r.status_code == 400 and r.json()["error"]["code"] == "authorization_pending"
    page = httpx.get(f"{lab.url}/auth/device", params={"user_code": "BBBB-CCCC"})
    assert page.status_code == 400 and "text/html" in page.headers["content-type"]


def test_oidc_not_configured(tau: Tau) -> None:
    require_bwrap()
    url = tau.start_server("--shared")["url"]
    for method, path in (
        ("POST", "/api/v1/auth/device"),
        ("POST", "/api/v1/auth/device/token"),
        ("GET", "/auth/device?user_code=ABCD-EFGH"),
        ("GET", "/auth/login"),
        ("GET", "/auth/callback?state=x&code=y"),
    ):
        r = httpx.request(
            method, url + path, json={"device_code": "x"} if "token" in path else None
        )
        assert r.status_code == 404, (path, r.text)
        assert r.json()["error"] == {"code": "not_found", "message": "OIDC login is not configured"}
    out = tau("login", url, "--oidc", "--name", "x")
    assert out.returncode != 0 and "offers no OIDC login" in out.stderr


def test_oidc_needs_https_beyond_loopback(tau: Tau, tmp_path: Path) -> None:
    proc = tau(
        "server",
        "start",
        "--shared",
        "--oidc-issuer",
        "http://idp.example",
        "--oidc-client-id",
        "x",
    )
    assert proc.returncode != 0
    assert "plain http" in proc.stdout + proc.stderr
