"""The OIDC protocol pieces that need no provider: claims to roles, URLs, codes, sync."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import pytest

from taugrid.errors import Forbidden, UsageError
from taugrid.server.oidc import (
    OIDCConfig,
    check_url,
    map_claims,
    new_user_code,
    normal_user_code,
    pkce_pair,
    sync_user,
)
from taugrid.store import connect
from taugrid.store.identity import IdentityStore

CFG = OIDCConfig("https://idp.example", "tau")


def test_groups_map_to_roles_and_admin() -> None:
    claims = {
        "sub": "u1",
        "email": "a@x.org",
        "groups": ["tau:a:viewer", "tau:a:maintainer", "tau:b:nope", "tau:admin", "other"],
    }
    assert map_claims(claims, CFG) == ("a@x.org", True, {"a": "maintainer"})
    assert map_claims({"sub": "u1"}, CFG) == ("u1", False, {})
    assert map_claims({"sub": "u1", "email": "a@x.org", "email_verified": False}, CFG)[0] == "u1"
    with pytest.raises(Forbidden):
        map_claims({"email": "x" * 64 + "@x.org"}, CFG)
    with pytest.raises(Forbidden):
        map_claims({}, CFG)


def test_issuer_needs_https_beyond_loopback() -> None:
    assert check_url("https://idp.example/") == "https://idp.example"
    assert check_url("http://127.0.0.1:9400") == "http://127.0.0.1:9400"
    assert check_url("http://localhost:9400/x") == "http://localhost:9400/x"
    for bad in ("http://idp.example", "ftp://idp.example", "idp.example"):
        with pytest.raises(UsageError):
            check_url(bad)


def test_codes() -> None:
    code = new_user_code()
    assert len(code) == 9 and code[4] == "-" and normal_user_code(code.lower()) == code
    assert normal_user_code("bcdf ghjk") == "BCDF-GHJK"
    verifier, challenge = pkce_pair()
    digest = hashlib.sha256(verifier.encode()).digest()
    assert challenge == base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def test_sync_replaces_roles_and_refuses_service_accounts(tmp_path: Path) -> None:
    eng = connect(f"sqlite:///{tmp_path / 'tau.db'}")
    try:
        ids = IdentityStore(eng)
        ids.create_workspace("a")
        ids.create_workspace("b")
        sync_user(ids, "al", True, {"a": "researcher", "ghost": "admin"})
        assert ids.user("al")["memberships"] == {"a": "researcher"} and ids.user("al")["admin"]
        ids.set_member("b", "al", "viewer")  # by hand: replaced at the next login
        sync_user(ids, "al", False, {"a": "viewer"})
        assert ids.user("al")["memberships"] == {"a": "viewer"} and not ids.user("al")["admin"]
        with pytest.raises(UsageError):
            ids.sync_grants("al", admin=False, roles={"a": "boss"})
        ids.add_user("bot", kind="service")
        with pytest.raises(Forbidden):
            sync_user(ids, "bot", False, {})
        ids.disable_user("al")
        with pytest.raises(Forbidden):
            sync_user(ids, "al", False, {})
    finally:
        eng.dispose()
