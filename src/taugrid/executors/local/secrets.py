"""Local secret store: one file per secret under ``$TAU_HOME/secrets`` (stdlib only).

A spec's ``secrets: {HF_TOKEN: hf/token}`` maps an environment variable to a secret
*reference*. The value lives only here, in a file readable by its owner alone (directory
0700, files 0600); run records, launch files, API answers and logs carry the reference
or the file's path, never the value. The supervisor reads the file when it starts the
workload and puts the value in the workload's environment only (``secret_files`` in
launch.json).

References are ``/``-separated segments of ``[A-Za-z0-9_.-]`` (``hf/token``,
``wandb.api-key``), at most 253 characters, no ``..``. Each is stored flat, as one file
whose name is the reference with ``/`` written as ``@`` (a character references cannot
contain), so ``hf`` and ``hf/token`` can both exist and nothing is ever created outside
the store's directory.

Nothing in this module puts a value into an exception message, a log line or a repr.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from taugrid.errors import NotFound, UsageError
from taugrid.executors.local.files import fsync_dir
from taugrid.home import tau_home

MAX_REF_LEN = 253
MAX_VALUE_BYTES = 64 * 1024
DIR_MODE = 0o700
FILE_MODE = 0o600

_SEGMENT = r"[A-Za-z0-9_.-]+"
_REF = re.compile(rf"{_SEGMENT}(?:/{_SEGMENT})*")
_SEP_ON_DISK = "@"  # not in the reference alphabet: the encoding is one-to-one
_TMP_PREFIX = "~tmp."  # "~" is not in the alphabet either: temp files are never refs


def check_ref(ref: str) -> str:
    """``ref`` if it is a valid secret reference, else :class:`UsageError`."""
    problem = _ref_problem(ref)
    if problem is not None:
        raise UsageError(f"invalid secret reference {ref!r}: {problem}")
    return ref


def _ref_problem(ref: object) -> str | None:
    if not isinstance(ref, str) or not ref:
        return "must be a non-empty string"
    if len(ref) > MAX_REF_LEN:
        return f"at most {MAX_REF_LEN} characters"
    if ref.startswith("/"):
        return "must not start with '/'"
    if ".." in ref:
        return "must not contain '..'"
    if not _REF.fullmatch(ref):
        return "use segments of letters, digits, '_', '.', '-' separated by '/' (e.g. hf/token)"
    if "." in ref.split("/"):
        return "a segment cannot be '.'"
    return None


def check_value(value: object) -> str:
    """``value`` if it can be stored and put in an environment, else :class:`UsageError`.

    The messages describe the problem, never the value.
    """
    if not isinstance(value, str):
        raise UsageError("a secret value must be a string")
    if not value:
        raise UsageError("a secret value cannot be empty")
    if "\0" in value:
        raise UsageError("a secret value cannot contain a NUL character")
    if len(value.encode("utf-8", "surrogateescape")) > MAX_VALUE_BYTES:
        raise UsageError(f"a secret value is at most {MAX_VALUE_BYTES // 1024} KiB")
    return value


def not_set_message(ref: str) -> str:
    return f"secret {ref!r} is not set; set it with: tau secret set {ref}"


@dataclass(frozen=True)
class SecretEntry:
    """What may be shown about a secret: its reference and when it was last set."""

    ref: str
    updated_at: float


class LocalSecretStore:
    """Secrets of one machine, in ``root`` (default ``$TAU_HOME/secrets``)."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = Path(root) if root is not None else tau_home() / "secrets"

    def __repr__(self) -> str:
        return f"LocalSecretStore({str(self.root)!r})"

    # -- paths ---------------------------------------------------------------------------
    def _file(self, ref: str) -> Path:
        return self.root / check_ref(ref).replace("/", _SEP_ON_DISK)

    def ensure_root(self) -> Path:
        """Create the directory (0700), tightening its mode if it already exists."""
        self.root.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            self.root.mkdir(mode=DIR_MODE)
        st = self.root.lstat()
        if not stat.S_ISDIR(st.st_mode):
            raise UsageError(f"{self.root} must be a directory")
        if stat.S_IMODE(st.st_mode) != DIR_MODE:
            os.chmod(self.root, DIR_MODE)
        return self.root

    def path_of(self, ref: str) -> Path:
        """The file holding ``ref``'s value; :class:`NotFound` when it is not set."""
        path = self._file(ref)
        if not path.is_file():
            raise NotFound(not_set_message(ref))
        return path

    # -- reads ---------------------------------------------------------------------------
    def exists(self, ref: str) -> bool:
        return self._file(ref).is_file()

    def missing(self, refs: Iterable[str]) -> list[str]:
        """The references of ``refs`` that are not set, once each, in the order given."""
        return [ref for ref in dict.fromkeys(refs) if not self.exists(ref)]

    def entries(self) -> list[SecretEntry]:
        """Every secret's reference and modification time, sorted by reference."""
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            return []
        out = []
        for name in names:
            ref = name.replace(_SEP_ON_DISK, "/")
            if name.startswith(_TMP_PREFIX) or _ref_problem(ref) is not None:
                continue
            try:
                st = (self.root / name).lstat()
            except FileNotFoundError:
                continue  # deleted meanwhile
            if stat.S_ISREG(st.st_mode):
                out.append(SecretEntry(ref, st.st_mtime))
        return sorted(out, key=lambda e: e.ref)

    def refs(self) -> list[str]:
        """The references that are set (names only), sorted."""
        return [e.ref for e in self.entries()]

    # -- writes --------------------------------------------------------------------------
    def set(self, ref: str, value: str) -> None:
        """Store ``value`` for ``ref`` (replacing any), atomically and durably.

        Readers see the old value or the new one, never a partial file: the value is
        written to a 0600 temp file in the same directory, fsynced, renamed over the
        target, and the directory is fsynced.
        """
        path = self._file(ref)
        check_value(value)
        root = self.ensure_root()
        tmp = root / f"{_TMP_PREFIX}{os.getpid()}.{os.urandom(6).hex()}"
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
        fsync_dir(root)

    def delete(self, ref: str) -> bool:
        """Remove ``ref``; False when it was not set."""
        path = self._file(ref)
        try:
            path.unlink()
        except FileNotFoundError:
            return False
        fsync_dir(self.root)
        return True


def require_secrets(store: LocalSecretStore, spec_secrets: Mapping[str, str]) -> None:
    """Submit-time check: :class:`UsageError` naming every reference that is not set."""
    missing = store.missing(spec_secrets.values())
    if not missing:
        return
    if len(missing) == 1:
        raise UsageError(not_set_message(missing[0]))
    commands = "; ".join(f"tau secret set {ref}" for ref in missing)
    names = ", ".join(repr(ref) for ref in missing)
    raise UsageError(f"secrets {names} are not set; set them with: {commands}")


def secret_files(
    store: LocalSecretStore, spec_secrets: Mapping[str, str], *, must_exist: bool = True
) -> dict[str, str]:
    """``secret_files`` for launch.json: environment variable -> absolute path of its file.

    Raises :class:`NotFound` for a reference that is not set, unless ``must_exist`` is
    false: then the path is given anyway and the supervisor fails the attempt (as a
    command that cannot start) if the file is still missing when it starts.
    """
    files = {}
    for env_name, ref in spec_secrets.items():
        path = store.path_of(ref) if must_exist else store._file(ref)
        files[env_name] = str(path.absolute())
    return files
