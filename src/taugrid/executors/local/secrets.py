"""Local secret store: one file per secret, per workspace and per user (stdlib only).

A spec's ``secrets: {HF_TOKEN: hf/token}`` maps an environment variable to a secret
*reference*. Values live only here, in files readable by the server's user alone
(directories 0700, files 0600); run records, launch files, API answers and logs carry the
reference or the file's path, never the value. The supervisor reads the file when it
starts the workload and puts the value in the workload's environment only
(``secret_files`` in launch.json).

Secrets belong to a workspace, and optionally to one user in it (a *personal* secret). A
run of workspace W submitted by user U resolves each reference among U's personal secrets
in W first, then W's secrets; never another workspace's. On disk::

    secrets/                       the store (0700)
      <workspace>/                 a workspace's secrets (0700)
        hf@token                   reference hf/token (0600)
        ~users/<user>/hf@token     U's personal hf/token in that workspace

References are ``/``-separated segments of ``[A-Za-z0-9_.-]`` (``hf/token``,
``wandb.api-key``), at most 253 characters, no ``..``; a file's name is the reference with
``/`` written as ``@`` (not in the alphabet), so ``hf`` and ``hf/token`` both exist and no
name leaves its directory. Names starting with ``~`` (not in the alphabet either) are
the store's own: ``~users``, temp files ``~tmp.*``. Workspace names are DNS names; user
names are written with every character outside ``[A-Za-z0-9_-]`` as ``%XX`` (UTF-8), or as
``#<sha256>`` when that is too long for a file name: one-to-one, and never ``.``/``..``.

Before workspaces, the store was one flat directory; :meth:`LocalSecretStore.migrate_flat_layout`
moves such secrets into the ``default`` workspace once, at server start.

Nothing in this module puts a value into an exception message, a log line or a repr.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path

from taugrid.domain.secret_refs import (
    DEFAULT_WORKSPACE,
    check_ref,
    check_value,
    check_workspace,
    not_set_message,
    ref_problem,
)
from taugrid.errors import NotFound, UsageError
from taugrid.executors.local.files import fsync_dir
from taugrid.home import tau_home
from taugrid.ports.secrets import SecretEntry, SecretScope

__all__ = ["LocalSecretStore", "SecretEntry", "SecretScope", "secret_files", "user_on_disk"]

MAX_NAME_ON_DISK = 200  # below NAME_MAX (255) with room for the temp-file prefix
DIR_MODE = 0o700
FILE_MODE = 0o600

# Workspace names as specs allow them (DNS subdomains): never "." or "..", never "~...".
_SEP_ON_DISK = "@"  # not in the reference alphabet: the encoding is one-to-one
_OWN = "~"  # not in the alphabet: names starting with it are never refs
_TMP_PREFIX = "~tmp."
_USERS_DIR = "~users"
_MIGRATING_DIR = "~flat"  # the old flat secrets gathered here, then renamed into place
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_-]")
_PLAIN_USER = re.compile(rf"[A-Za-z0-9_-]{{1,{MAX_NAME_ON_DISK}}}")


def user_on_disk(user: str) -> str:
    """The directory name of ``user``'s personal secrets (see the module docstring)."""
    if not isinstance(user, str) or not user:
        raise UsageError("a personal secret needs a user name")
    if _PLAIN_USER.fullmatch(user):
        return user  # the usual name, spelled as is
    name = "".join(
        c if _PLAIN_NAME.fullmatch(c) else "".join(f"%{b:02X}" for b in c.encode("utf-8"))
        for c in user
    )
    if len(name) > MAX_NAME_ON_DISK:
        return "#" + hashlib.sha256(user.encode("utf-8", "surrogatepass")).hexdigest()
    return name


class LocalSecretStore:
    """Secrets of one server, in ``root`` (default ``$TAU_HOME/secrets``)."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = Path(root) if root is not None else tau_home() / "secrets"

    def __repr__(self) -> str:
        return f"LocalSecretStore({str(self.root)!r})"

    # -- paths ---------------------------------------------------------------------------
    def dir_of(self, scope: SecretScope) -> Path:
        ws = self.root / check_workspace(scope.workspace)
        if scope.owner is None:
            return ws
        return ws / _USERS_DIR / user_on_disk(scope.owner)

    def file_of(self, scope: SecretScope, ref: str) -> Path:
        """Where ``ref`` of ``scope`` is (or would be) kept; no check that it is set."""
        return self.dir_of(scope) / check_ref(ref).replace("/", _SEP_ON_DISK)

    def _ensure_dir(self, scope: SecretScope) -> Path:
        """Create the scope's directory and those above it (0700), tightening modes."""
        target = self.dir_of(scope)
        self.root.parent.mkdir(parents=True, exist_ok=True)
        path = self.root
        for part in (None, *target.relative_to(self.root).parts):
            if part is not None:
                path = path / part
            _private_dir(path)
        return target

    def path_of(self, scope: SecretScope, ref: str) -> Path:
        """The file holding ``ref``'s value in ``scope``; :class:`NotFound` when not set."""
        path = self.file_of(scope, ref)
        if not path.is_file():
            raise NotFound(not_set_message(ref, scope.workspace, personal=scope.owner is not None))
        return path

    # -- reads ---------------------------------------------------------------------------
    def exists(self, scope: SecretScope, ref: str) -> bool:
        return self.file_of(scope, ref).is_file()

    def resolve(self, workspace: str, user: str | None, ref: str) -> Path | None:
        """The file a run of ``workspace`` submitted by ``user`` gets for ``ref``: the
        user's personal secret, else the workspace's; None when neither is set."""
        scopes = [SecretScope(workspace, user)] if user else []
        for scope in (*scopes, SecretScope(workspace)):
            path = self.file_of(scope, ref)
            if path.is_file():
                return path
        return None

    def missing(self, workspace: str, user: str | None, refs: Iterable[str]) -> list[str]:
        """The references of ``refs`` that resolve to nothing, once each, in order given."""
        return [ref for ref in dict.fromkeys(refs) if self.resolve(workspace, user, ref) is None]

    def entries(self, scope: SecretScope) -> list[SecretEntry]:
        """Every secret of ``scope``: reference and modification time, sorted by reference."""
        where = self.dir_of(scope)
        try:
            names = os.listdir(where)
        except (FileNotFoundError, NotADirectoryError):
            return []
        out = []
        for name in names:
            ref = name.replace(_SEP_ON_DISK, "/")
            if name.startswith(_OWN) or ref_problem(ref) is not None:
                continue
            try:
                st = (where / name).lstat()
            except FileNotFoundError:
                continue  # deleted meanwhile
            if stat.S_ISREG(st.st_mode):
                out.append(SecretEntry(ref, st.st_mtime, scope.kind, scope.owner))
        return sorted(out, key=lambda e: e.ref)

    def refs(self, scope: SecretScope) -> list[str]:
        """The references set in ``scope`` (names only), sorted."""
        return [e.ref for e in self.entries(scope)]

    # -- writes --------------------------------------------------------------------------
    def set(self, scope: SecretScope, ref: str, value: str) -> None:
        """Store ``value`` for ``ref`` in ``scope`` (replacing any), atomically and durably.

        Readers see the old value or the new one, never a partial file: the value is
        written to a 0600 temp file in the same directory, fsynced, renamed over the
        target, and the directory is fsynced.
        """
        path = self.file_of(scope, ref)
        check_value(value)
        where = self._ensure_dir(scope)
        tmp = where / f"{_TMP_PREFIX}{os.getpid()}.{os.urandom(6).hex()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE)
        try:
            try:
                os.fchmod(fd, FILE_MODE)  # whatever the umask
                data = value.encode("utf-8", "surrogateescape")
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        fsync_dir(where)

    def delete(self, scope: SecretScope, ref: str) -> bool:
        """Remove ``ref`` from ``scope``; False when it was not set there."""
        path = self.file_of(scope, ref)
        try:
            path.unlink()
        except (FileNotFoundError, NotADirectoryError):
            return False
        fsync_dir(path.parent)
        return True

    # -- the flat layout of before workspaces -------------------------------------------------
    def workload_refs(
        self,
        workspace: str,
        user: str | None,
        spec_secrets: Mapping[str, str],
        *,
        must_exist: bool = True,
    ) -> dict[str, str]:
        """The secret store port's hand-over: each env name -> the file the supervisor
        reads the value from (``secret_files``)."""
        return secret_files(self, workspace, user, spec_secrets, must_exist=must_exist)

    def migrate_flat_layout(self, workspace: str = DEFAULT_WORKSPACE) -> int:
        """Move secrets of the old flat layout (files directly in the store) into
        ``workspace``'s directory; the number moved. Safe to run at every start.

        The files are hard-linked into ``~flat/``, which is then renamed to the
        workspace's directory: that one rename is the switch, so a crash leaves either the
        old layout whole or the new one (the old links are removed after). When the
        workspace already has a directory, each file is renamed into it instead, where the
        newer of two values of one reference wins. Values are never copied or rewritten.
        """
        check_workspace(workspace)
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            return 0
        staging = self.root / _MIGRATING_DIR
        flat = []
        for name in names:
            st = os.lstat(self.root / name)
            if not stat.S_ISREG(st.st_mode):
                continue
            if name.startswith(_TMP_PREFIX):
                os.unlink(self.root / name)  # a write the old server never finished
            elif ref_problem(name.replace(_SEP_ON_DISK, "/")) is None:
                flat.append(name)
        if not flat and not staging.is_dir():
            return 0
        _private_dir(self.root)
        _private_dir(staging)
        for name in flat:
            tmp = staging / f"{_TMP_PREFIX}{name}"
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            os.link(self.root / name, tmp)
            os.replace(tmp, staging / name)
        fsync_dir(staging)
        target = self.root / workspace
        if workspace in flat:
            # A flat secret named like the workspace holds the name; it is in staging now.
            os.unlink(target)
        if not target.exists():
            os.rename(staging, target)
        else:
            _merge_into(staging, target)
        fsync_dir(target)
        for name in flat:
            if name != workspace:  # that one was unlinked before the switch
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.root / name)
        fsync_dir(self.root)
        return len(flat)


def _private_dir(path: Path) -> None:
    """``path`` exists as a real directory (not a symlink) with mode 0700."""
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=DIR_MODE)
    st = path.lstat()
    if not stat.S_ISDIR(st.st_mode):
        raise UsageError(f"{path} must be a directory")
    if stat.S_IMODE(st.st_mode) != DIR_MODE:
        os.chmod(path, DIR_MODE)


def _merge_into(staging: Path, target: Path) -> None:
    _private_dir(target)
    for name in os.listdir(staging):
        src, dst = staging / name, target / name
        if name.startswith(_OWN):
            os.unlink(src)
            continue
        try:
            old = dst.lstat()
        except FileNotFoundError:
            old = None
        new = src.lstat()
        if old is not None and (old.st_ino == new.st_ino or old.st_mtime >= new.st_mtime):
            os.unlink(src)  # already moved by an interrupted migration, or set since
        else:
            os.replace(src, dst)
    fsync_dir(target)
    os.rmdir(staging)


def secret_files(
    store: LocalSecretStore,
    workspace: str,
    user: str | None,
    spec_secrets: Mapping[str, str],
    *,
    must_exist: bool = True,
) -> dict[str, str]:
    """``secret_files`` for launch.json: environment variable -> absolute path of the file
    that ``workspace``'s run by ``user`` gets (personal first, then the workspace's).

    Raises :class:`NotFound` for a reference that resolves to nothing, unless
    ``must_exist`` is false: then the workspace's path is given anyway and the supervisor
    fails the attempt (as a command that cannot start) if it is still missing then.
    """
    files = {}
    for env_name, ref in spec_secrets.items():
        path = store.resolve(workspace, user, ref)
        if path is None:
            if must_exist:
                raise NotFound(not_set_message(ref, workspace))
            path = store.file_of(SecretScope(workspace), ref)
        files[env_name] = str(path.absolute())
    return files
