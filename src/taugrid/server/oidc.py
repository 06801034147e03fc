"""OIDC login: an RFC 8628 device flow served by TauGrid, and the authorization-code flow
with PKCE (S256) against any OpenID Connect provider.

The CLI asks for a device code and polls; the person opens ``/auth/device`` in a browser,
which sends them to the provider; the provider sends them back to ``/auth/callback``,
where the code is exchanged (back channel, with the PKCE verifier) for an access token,
the userinfo endpoint names the user and their groups, and the device code is approved.
The portal uses the same callback without a device code (a session cookie instead).

Pending device codes and login states live in memory: a restart loses logins in progress.
The HTTP client is the standard library's ``urllib.request``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from taugrid.domain.access import ROLES
from taugrid.errors import Forbidden, NotFound, TauError, UsageError
from taugrid.net import is_loopback_host
from taugrid.server.settings import ServerSettings
from taugrid.store.identity import IdentityStore, NewToken

DEVICE_TTL_S = 600.0
STATE_TTL_S = 600.0
POLL_INTERVAL_S = 1
TOKEN_TTL_S = 30 * 86400.0  # the API token a device login hands to the CLI
SESSION_TTL_S = 7 * 86400.0  # the portal's session cookie (an API token as well)
SESSION_COOKIE = "tau_session"
SCOPE = "openid email profile groups"
USER_CODE_ALPHABET = "BCDFGHJKLMNPQRSTVWXZ"  # no vowels: no words (RFC 8628 6.1)
MAX_NAME = 63  # users.name
NOT_CONFIGURED = "OIDC login is not configured"


class OAuthError(TauError):
    """An RFC 6749/8628 error at the token endpoint: ``authorization_pending``,
    ``expired_token``, ``access_denied``, ``invalid_grant``; the body keeps the shape
    ``{"error": {"code", "message"}}``."""

    http_status = 400

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class ProviderError(TauError):
    """The provider could not be reached or answered something unusable."""

    code = "oidc_provider"
    http_status = 502


@dataclass(frozen=True)
class OIDCConfig:
    issuer: str
    client_id: str
    client_secret: str | None = None
    user_claim: str = "email"
    groups_claim: str = "groups"


def check_url(url: str, what: str = "--oidc-issuer") -> str:
    """https, or http on loopback (a local test provider); returned without a final /."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"{what}: expected an https:// URL, got {url!r}")
    if parts.scheme == "http" and not is_loopback_host(parts.hostname):
        raise UsageError(f"{what}: plain http is allowed only on 127.0.0.1 or localhost: {url}")
    return url.rstrip("/")


def load_config(
    issuer: str,
    client_id: str | None,
    secret_file: Path | None,
    user_claim: str = "email",
    groups_claim: str = "groups",
) -> OIDCConfig:
    if not client_id:
        raise UsageError("--oidc-issuer needs --oidc-client-id")
    secret = None
    if secret_file is not None:
        try:
            secret = secret_file.read_text().strip() or None
        except OSError as exc:
            raise UsageError(
                f"--oidc-client-secret-file: cannot read {secret_file}: {exc}"
            ) from exc
    return OIDCConfig(check_url(issuer), client_id, secret, user_claim, groups_claim)


def map_claims(claims: Mapping[str, Any], cfg: OIDCConfig) -> tuple[str, bool, dict[str, str]]:
    """``(user name, platform admin, {workspace: role})`` from userinfo claims. Groups
    ``tau:<workspace>:<role>`` give roles (the highest when several name one workspace),
    ``tau:admin`` platform admin; other groups are ignored."""
    name = claims.get(cfg.user_claim)
    if cfg.user_claim == "email" and claims.get("email_verified") is False:
        name = None  # an unverified address names nobody
    if not isinstance(name, str) or not name:
        name = claims.get("sub")
    if not isinstance(name, str) or not name.strip():
        raise Forbidden(f"the provider named no user (claims {cfg.user_claim!r} and 'sub')")
    name = name.strip()
    if len(name) > MAX_NAME or not name.isprintable():
        raise Forbidden(f"user name from the provider is unusable: {name[:80]!r}")
    groups = claims.get(cfg.groups_claim) or []
    if isinstance(groups, str):
        groups = groups.split()
    admin = False
    roles: dict[str, str] = {}
    for g in groups if isinstance(groups, list) else []:
        if not isinstance(g, str):
            continue
        if g == "tau:admin":
            admin = True
            continue
        parts = g.split(":")
        if len(parts) == 3 and parts[0] == "tau" and parts[1] and parts[2] in ROLES:
            ws, role = parts[1], parts[2]
            if ws not in roles or ROLES.index(role) < ROLES.index(roles[ws]):
                roles[ws] = role
    return name, admin, roles


def sync_user(identity: IdentityStore, name: str, admin: bool, roles: Mapping[str, str]) -> None:
    """Create the user on first login; then the groups replace admin flag and memberships."""
    try:
        user = identity.user(name)
    except NotFound:
        identity.add_user(name, kind="user", admin=False)
    else:
        if user["disabled"]:
            raise Forbidden(f"user {name} is disabled")
        if user["kind"] != "user":
            raise Forbidden(f"{name} is a service account; it cannot log in through OIDC")
    identity.sync_grants(name, admin=admin, roles=roles)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def pkce_pair() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    return verifier, _b64(hashlib.sha256(verifier.encode()).digest())


def new_user_code() -> str:
    c = "".join(secrets.choice(USER_CODE_ALPHABET) for _ in range(8))
    return f"{c[:4]}-{c[4:]}"


def normal_user_code(text: str) -> str:
    c = "".join(ch for ch in text.upper() if ch.isalnum())
    return f"{c[:4]}-{c[4:]}"


class Provider:
    """Discovery (cached), code exchange and userinfo, over urllib."""

    def __init__(self, cfg: OIDCConfig, timeout: float = 10.0) -> None:
        self.cfg = cfg
        self.timeout = timeout
        self._meta: dict[str, Any] | None = None
        self._lock = threading.Lock()
        host = urllib.parse.urlsplit(cfg.issuer).hostname or ""
        # A loopback provider is never reached through a proxy.
        handlers = [urllib.request.ProxyHandler({})] if is_loopback_host(host) else []
        self._opener = urllib.request.build_opener(*handlers)

    def metadata(self) -> dict[str, Any]:
        with self._lock:
            if self._meta is None:
                meta = self._json(f"{self.cfg.issuer}/.well-known/openid-configuration")
                for key in ("authorization_endpoint", "token_endpoint", "userinfo_endpoint"):
                    if not isinstance(meta.get(key), str):
                        raise ProviderError(f"the provider's discovery document lacks {key}")
                    try:
                        check_url(meta[key], key)
                    except UsageError as exc:
                        raise ProviderError(exc.message) from None
                self._meta = meta
            return self._meta

    def authorize_url(self, redirect_uri: str, state: str, challenge: str, nonce: str) -> str:
        endpoint = self.metadata()["authorization_endpoint"]
        query = urllib.parse.urlencode(
            {
                "response_type": "code",
                "client_id": self.cfg.client_id,
                "redirect_uri": redirect_uri,
                "scope": SCOPE,
                "state": state,
                "code_challenge": challenge,
                "code_challenge_method": "S256",
                "nonce": nonce,
            }
        )
        return f"{endpoint}{'&' if '?' in endpoint else '?'}{query}"

    def exchange(self, code: str, verifier: str, redirect_uri: str) -> str:
        """The access token for an authorization code."""
        meta = self.metadata()
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": redirect_uri,
            "code_verifier": verifier,
            "client_id": self.cfg.client_id,
        }
        headers: dict[str, str] = {}
        if self.cfg.client_secret is not None:
            methods = meta.get("token_endpoint_auth_methods_supported") or ["client_secret_basic"]
            if "client_secret_basic" in methods:
                pair = ":".join(
                    urllib.parse.quote(v, safe="")
                    for v in (self.cfg.client_id, self.cfg.client_secret)
                )
                headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
            else:
                form["client_secret"] = self.cfg.client_secret
        data = urllib.parse.urlencode(form).encode()
        answer = self._json(meta["token_endpoint"], data=data, headers=headers)
        token = answer.get("access_token")
        if not isinstance(token, str) or not token:
            raise ProviderError("the provider's token endpoint answered no access_token")
        return token

    def userinfo(self, access_token: str) -> dict[str, Any]:
        url = self.metadata()["userinfo_endpoint"]
        return self._json(url, headers={"Authorization": f"Bearer {access_token}"})

    def _json(
        self, url: str, *, data: bytes | None = None, headers: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        req = urllib.request.Request(url, data=data, headers={"Accept": "application/json"})
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        if data is not None:
            req.add_header("Content-Type", "application/x-www-form-urlencoded")
        try:
            with self._opener.open(req, timeout=self.timeout) as resp:
                body = resp.read(1 << 20)
        except urllib.error.HTTPError as exc:
            detail = exc.read(500).decode(errors="replace")
            raise ProviderError(f"{url} answered HTTP {exc.code}: {detail}") from None
        except OSError as exc:
            raise ProviderError(f"cannot reach the OIDC provider at {url}: {exc}") from None
        try:
            doc = json.loads(body)
        except ValueError:
            raise ProviderError(f"{url} answered something else than JSON") from None
        if not isinstance(doc, dict):
            raise ProviderError(f"{url} answered something else than a JSON object")
        return doc


@dataclass
class DeviceCode:
    device_code: str
    user_code: str
    expires_at: float
    user: str | None = None
    denied: str | None = None  # why the person or the provider refused


@dataclass
class LoginState:
    """One trip to the provider: bound to a device code, or to the portal's ``next``."""

    verifier: str
    nonce: str
    redirect_uri: str
    expires_at: float
    device_code: str | None = None
    next_path: str = "/"


@dataclass
class Login:
    """What a finished callback did: the user, and the portal's session token if any."""

    user: str
    session: NewToken | None = None
    next_path: str = "/"
    device: bool = field(default=False)


class OIDCLogin:
    def __init__(
        self,
        cfg: OIDCConfig,
        identity: IdentityStore,
        provider: Provider | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cfg = cfg
        self.identity = identity
        self.provider = provider or Provider(cfg)
        self.clock = clock
        self._devices: dict[str, DeviceCode] = {}
        self._by_user_code: dict[str, str] = {}
        self._states: dict[str, LoginState] = {}
        self._lock = threading.Lock()

    # -- device codes -----------------------------------------------------------------------
    def new_device(self) -> DeviceCode:
        with self._lock:
            self._expire()
            user_code = new_user_code()
            while user_code in self._by_user_code:
                user_code = new_user_code()
            dev = DeviceCode(secrets.token_urlsafe(32), user_code, self.clock() + DEVICE_TTL_S)
            self._devices[dev.device_code] = dev
            self._by_user_code[user_code] = dev.device_code
            return dev

    def begin_device(self, user_code: str, redirect_uri: str) -> str:
        """The provider URL for a pending user code; NotFound when unknown or expired."""
        with self._lock:
            self._expire()
            dc = self._by_user_code.get(normal_user_code(user_code))
            dev = self._devices.get(dc) if dc else None
            if dev is None or dev.user is not None or dev.denied is not None:
                raise NotFound("unknown, expired or already used code")
        return self._begin(redirect_uri, device_code=dev.device_code)

    def begin_portal(self, redirect_uri: str, next_path: str) -> str:
        return self._begin(redirect_uri, next_path=next_path)

    def _begin(
        self, redirect_uri: str, *, device_code: str | None = None, next_path: str = "/"
    ) -> str:
        verifier, challenge = pkce_pair()
        state, nonce = secrets.token_urlsafe(24), secrets.token_urlsafe(16)
        url = self.provider.authorize_url(redirect_uri, state, challenge, nonce)
        with self._lock:
            self._states[state] = LoginState(
                verifier, nonce, redirect_uri, self.clock() + STATE_TTL_S, device_code, next_path
            )
        return url

    def poll(self, device_code: str) -> tuple[str, NewToken]:
        """The user and a new API token once approved (then the code is gone)."""
        with self._lock:
            self._expire()
            dev = self._devices.get(device_code)
            if dev is None:
                raise OAuthError("expired_token", "unknown or expired device code; log in again")
            if dev.denied is not None:
                self._drop(dev)
                raise OAuthError("access_denied", dev.denied)
            if dev.user is None:
                raise OAuthError("authorization_pending", "waiting for the sign-in in the browser")
            self._drop(dev)
            user = dev.user
        return user, self.identity.create_token(user, name="oidc", expires_in_s=TOKEN_TTL_S)

    # -- the callback -----------------------------------------------------------------------
    def take_state(self, state: str) -> LoginState:
        with self._lock:
            self._expire()
            found = self._states.pop(state, None)
        if found is None:
            raise UsageError("unknown or expired login state; start the login again")
        return found

    def deny(self, st: LoginState, why: str) -> None:
        with self._lock:
            dev = self._devices.get(st.device_code or "")
            if dev is not None:
                dev.denied = why

    def finish(self, st: LoginState, code: str) -> Login:
        """Exchange the code, read userinfo, create/sync the user; approve the device code
        or make the portal's session token."""
        access = self.provider.exchange(code, st.verifier, st.redirect_uri)
        claims = self.provider.userinfo(access)
        name, admin, roles = map_claims(claims, self.cfg)
        sync_user(self.identity, name, admin, roles)
        if st.device_code is None:
            made = self.identity.create_token(name, name="portal", expires_in_s=SESSION_TTL_S)
            return Login(name, made, st.next_path)
        with self._lock:
            dev = self._devices.get(st.device_code)
            if dev is None or dev.expires_at <= self.clock():
                raise UsageError("the device code expired meanwhile; run tau login again")
            dev.user = name
        return Login(name, device=True)

    # -- housekeeping (under the lock) ------------------------------------------------------
    def _expire(self) -> None:
        now = self.clock()
        for dev in [d for d in self._devices.values() if d.expires_at <= now]:
            self._drop(dev)
        for key in [k for k, s in self._states.items() if s.expires_at <= now]:
            del self._states[key]

    def _drop(self, dev: DeviceCode) -> None:
        self._devices.pop(dev.device_code, None)
        self._by_user_code.pop(dev.user_code, None)


def config_from(settings: ServerSettings) -> OIDCConfig | None:
    """The OIDC configuration the settings ask for (UsageError when unusable); None: off."""
    if not settings.oidc_issuer:
        return None
    return load_config(
        settings.oidc_issuer,
        settings.oidc_client_id,
        settings.oidc_client_secret_file,
        settings.oidc_user_claim,
        settings.oidc_groups_claim,
    )


def oidc_login(settings: ServerSettings, identity: IdentityStore) -> OIDCLogin | None:
    """The login service the settings ask for; None when OIDC is off."""
    cfg = config_from(settings)
    return None if cfg is None else OIDCLogin(cfg, identity)
