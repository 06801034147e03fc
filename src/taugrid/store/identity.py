"""Users, API tokens, workspaces, memberships and the audit log.

Tokens are ``tau_<id>_<secret>``: the id finds the row, the secret is checked against a
salted sha256 in constant time, and only the hash is stored. (Tokens are 256-bit random,
so a fast hash is enough; a slow password hash would cost every API call.)
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, and_, delete, insert, select, update
from sqlalchemy.exc import IntegrityError

from taugrid.domain.access import Caller, Role
from taugrid.errors import Conflict, NotFound, UsageError
from taugrid.store.db import write_transaction
from taugrid.store.tables import audit, memberships, tokens, users, workspaces

Row = dict[str, Any]
TOKEN_PREFIX = "tau_"
LAST_USED_EVERY_S = 60.0  # last_used_at is a hint: one write a minute per token at most


@dataclass(frozen=True)
class NewToken:
    row: Row
    secret: str  # the whole token, shown once


def _hash(salt: str, secret: str) -> str:
    return hashlib.sha256(f"{salt}:{secret}".encode()).hexdigest()


def parse_token(token: str) -> tuple[str, str] | None:
    """``(id, secret)`` of a well-formed ``tau_<id>_<secret>``, else None."""
    if not token.startswith(TOKEN_PREFIX):
        return None
    tid, sep, secret = token[len(TOKEN_PREFIX) :].partition("_")
    if not sep or not tid.isalnum() or len(tid) > 16 or not secret:
        return None
    return tid, secret


class IdentityStore:
    def __init__(self, engine: Engine, clock: Callable[[], float] = time.time) -> None:
        self.engine = engine
        self.clock = clock

    # -- users ----------------------------------------------------------------------------
    def add_user(self, name: str, *, kind: str = "user", admin: bool = False) -> Row:
        row = {
            "name": name,
            "kind": kind,
            "admin": admin,
            "disabled": False,
            "created_at": self.clock(),
        }
        try:
            with write_transaction(self.engine) as conn:
                conn.execute(insert(users), row)
        except IntegrityError:
            raise Conflict(f"user '{name}' already exists") from None
        return {**row, "memberships": {}}

    def user(self, name: str) -> Row:
        with self.engine.connect() as conn:
            r = conn.execute(select(users).where(users.c.name == name)).mappings().first()
            if r is None:
                raise NotFound(f"no user '{name}'")
            roles = conn.execute(
                select(memberships.c.workspace, memberships.c.role).where(
                    memberships.c.user == name
                )
            ).all()
        return {**dict(r), "memberships": {w: role for w, role in roles}}

    def users(self) -> list[Row]:
        with self.engine.connect() as conn:
            rows = [dict(r) for r in conn.execute(select(users).order_by(users.c.name)).mappings()]
            roles = conn.execute(select(memberships)).mappings().all()
        by_user: dict[str, dict[str, str]] = {}
        for m in roles:
            by_user.setdefault(m["user"], {})[m["workspace"]] = m["role"]
        return [{**r, "memberships": by_user.get(r["name"], {})} for r in rows]

    def disable_user(self, name: str) -> Row:
        with write_transaction(self.engine) as conn:
            res = conn.execute(update(users).where(users.c.name == name).values(disabled=True))
        if res.rowcount != 1:
            raise NotFound(f"no user '{name}'")
        return self.user(name)

    def sync_grants(self, name: str, *, admin: bool, roles: Mapping[str, str]) -> Row:
        """Replace the user's admin flag and every membership at once (OIDC group sync);
        workspaces that do not exist are skipped."""
        bad = sorted(r for r in roles.values() if r not in {x.value for x in Role})
        if bad:
            raise UsageError(f"unknown role '{bad[0]}'; roles: {', '.join(r.value for r in Role)}")
        with write_transaction(self.engine) as conn:
            res = conn.execute(update(users).where(users.c.name == name).values(admin=admin))
            if res.rowcount != 1:
                raise NotFound(f"no user '{name}'")
            known = {w for (w,) in conn.execute(select(workspaces.c.name))}
            conn.execute(delete(memberships).where(memberships.c.user == name))
            for ws, role in sorted(roles.items()):
                if ws in known:
                    conn.execute(insert(memberships), {"workspace": ws, "user": name, "role": role})
        return self.user(name)

    # -- tokens ---------------------------------------------------------------------------
    def create_token(
        self, user: str, *, name: str | None = None, expires_in_s: float | None = None
    ) -> NewToken:
        self.user(user)  # NotFound for an unknown user
        tid = secrets.token_hex(6)
        secret = secrets.token_urlsafe(32)
        salt = secrets.token_hex(16)
        now = self.clock()
        row = {
            "id": tid,
            "user": user,
            "name": name,
            "salt": salt,
            "hash": _hash(salt, secret),
            "created_at": now,
            "expires_at": None if expires_in_s is None else now + expires_in_s,
            "revoked_at": None,
            "last_used_at": None,
        }
        with write_transaction(self.engine) as conn:
            conn.execute(insert(tokens), row)
        public = {k: v for k, v in row.items() if k not in ("salt", "hash")}
        return NewToken(public, f"{TOKEN_PREFIX}{tid}_{secret}")

    def tokens(self, user: str | None = None) -> list[Row]:
        q = select(*[c for c in tokens.c if c.name not in ("salt", "hash")]).order_by(
            tokens.c.created_at
        )
        if user:
            q = q.where(tokens.c.user == user)
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(q).mappings()]

    def revoke_token(self, tid: str) -> None:
        with write_transaction(self.engine) as conn:
            res = conn.execute(
                update(tokens)
                .where(tokens.c.id == tid, tokens.c.revoked_at.is_(None))
                .values(revoked_at=self.clock())
            )
        if res.rowcount != 1:
            raise NotFound(f"no active token '{tid}'")

    def authenticate(self, token: str) -> Caller | None:
        """The caller a token stands for; None when it is unknown, wrong, expired, revoked
        or its user disabled. The secret is compared in constant time."""
        parsed = parse_token(token)
        if parsed is None:
            return None
        tid, secret = parsed
        q = (
            select(tokens, users.c.admin, users.c.disabled, users.c.kind)
            .join(users, users.c.name == tokens.c.user)
            .where(tokens.c.id == tid)
        )
        with self.engine.connect() as conn:
            r = conn.execute(q).mappings().first()
        # Hash even when the id is unknown, so the answer takes as long either way.
        salt = r["salt"] if r else "0" * 32
        ok = hmac.compare_digest(_hash(salt, secret), r["hash"] if r else "0" * 64)
        if r is None or not ok or r["revoked_at"] is not None or r["disabled"]:
            return None
        now = self.clock()
        if r["expires_at"] is not None and r["expires_at"] <= now:
            return None
        if r["last_used_at"] is None or now - r["last_used_at"] > LAST_USED_EVERY_S:
            with write_transaction(self.engine) as conn:
                conn.execute(update(tokens).where(tokens.c.id == tid).values(last_used_at=now))
        return self.caller(r["user"], auth="token")

    def caller(self, name: str, *, auth: str) -> Caller:
        u = self.user(name)
        return Caller(
            user=name,
            admin=bool(u["admin"]),
            memberships={w: Role(r) for w, r in u["memberships"].items()},
            kind=u["kind"],
            auth=auth,
        )

    # -- workspaces -----------------------------------------------------------------------
    def create_workspace(self, name: str) -> Row:
        row = {"name": name, "created_at": self.clock()}
        try:
            with write_transaction(self.engine) as conn:
                conn.execute(insert(workspaces), row)
        except IntegrityError:
            raise Conflict(f"workspace '{name}' already exists") from None
        return {**row, "members": {}}

    def workspaces(self) -> list[Row]:
        with self.engine.connect() as conn:
            rows = conn.execute(select(workspaces).order_by(workspaces.c.name)).mappings().all()
            members = conn.execute(select(memberships)).mappings().all()
        by_ws: dict[str, dict[str, str]] = {}
        for m in members:
            by_ws.setdefault(m["workspace"], {})[m["user"]] = m["role"]
        return [{**dict(r), "members": by_ws.get(r["name"], {})} for r in rows]

    def workspace_exists(self, name: str) -> bool:
        with self.engine.connect() as conn:
            q = select(workspaces.c.name).where(workspaces.c.name == name)
            return conn.execute(q).first() is not None

    def delete_workspace(self, name: str) -> None:
        with write_transaction(self.engine) as conn:
            conn.execute(delete(memberships).where(memberships.c.workspace == name))
            res = conn.execute(delete(workspaces).where(workspaces.c.name == name))
        if res.rowcount != 1:
            raise NotFound(f"no workspace '{name}'")

    def set_member(self, workspace: str, user: str, role: str) -> Row:
        if role not in {r.value for r in Role}:
            raise UsageError(f"unknown role '{role}'; roles: {', '.join(r.value for r in Role)}")
        if not self.workspace_exists(workspace):
            raise NotFound(f"no workspace '{workspace}'")
        self.user(user)
        key = and_(memberships.c.workspace == workspace, memberships.c.user == user)
        with write_transaction(self.engine) as conn:
            conn.execute(delete(memberships).where(key))
            conn.execute(insert(memberships), {"workspace": workspace, "user": user, "role": role})
        return {"workspace": workspace, "user": user, "role": role}

    def remove_member(self, workspace: str, user: str) -> None:
        key = and_(memberships.c.workspace == workspace, memberships.c.user == user)
        with write_transaction(self.engine) as conn:
            res = conn.execute(delete(memberships).where(key))
        if res.rowcount != 1:
            raise NotFound(f"'{user}' is not a member of workspace '{workspace}'")

    # -- audit (append-only: there is no update or delete) --------------------------------
    def audit(self, entry: Mapping[str, Any]) -> None:
        with write_transaction(self.engine) as conn:
            conn.execute(insert(audit), {"at": self.clock(), **entry})

    def audit_entries(
        self,
        *,
        actor: str | None = None,
        action: str | None = None,
        workspace: str | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int = 100,
    ) -> list[Row]:
        q = select(audit).order_by(audit.c.id.desc()).limit(limit)
        if actor:
            q = q.where(audit.c.actor == actor)
        if action:
            q = q.where(audit.c.action == action)
        if workspace:
            q = q.where(audit.c.workspace == workspace)
        if since is not None:
            q = q.where(audit.c.at >= since)
        if until is not None:
            q = q.where(audit.c.at < until)
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(q).mappings()]
