"""Content-addressed code snapshots: a deterministic ``.tar.gz`` of a run's workdir.

The archive bytes depend only on the included paths, their content, their executable bit
and symlink targets (plus the git metadata in ``.tau-snapshot/``), so the same code always
gets the same sha256 and is stored once as ``<store_dir>/<sha256>.tar.gz``.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import posixpath
import shutil
import stat
import subprocess
import tarfile
import tempfile
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from taugrid.domain.submit_limits import MAX_SNAPSHOT_BYTES, MAX_SNAPSHOT_MEMBERS
from taugrid.errors import SnapshotInvalid, SnapshotTooLarge, TauError, UsageError
from taugrid.fsdurable import fsync_dir
from taugrid.workdir.ignore import IgnorePattern, is_ignored, parse_patterns

META_DIR = ".tau-snapshot"
"""Reserved top-level directory of an archive holding TauGrid's own metadata."""

ALWAYS_SKIPPED = frozenset({".git", "__pycache__"})
"""Never code: repository internals (the commit and diff go to git.json) and bytecode."""

DEFAULT_MAX_BYTES = MAX_SNAPSHOT_BYTES  # the server accepts no more (domain.submit_limits)
_GIT_TIMEOUT_S = 30.0
_CHUNK = 1 << 20

ArchiveProgress = Callable[[int, int, int, int], None]
"""Told while an archive is written: (files done, bytes done, files in all, bytes in all);
files count regular files and symlinks, bytes their content. Called often (every read of
a file's content): a caller that draws decides how often to redraw."""


@dataclass(frozen=True)
class SnapshotInfo:
    digest: str  # sha256 hex of the archive bytes
    path: Path  # <store_dir>/<digest>.tar.gz
    size_bytes: int  # archive size
    file_count: int  # regular files and symlinks taken from the workdir
    content_bytes: int  # total size of those regular files, uncompressed
    git: dict[str, object] | None  # content of .tau-snapshot/git.json, None outside a repo


@dataclass(frozen=True)
class _Entry:
    rel: str  # posix path relative to the workdir
    abs: str
    kind: str  # "file" | "dir" | "link"
    size: int = 0
    executable: bool = False
    target: str = ""  # symlink target


def _human(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def _read_ignore_file(path: str, base: str, prefix: str = "") -> list[IgnorePattern]:
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            return parse_patterns(f, base, prefix)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return []


def _ancestor_rules(workdir: Path) -> list[IgnorePattern]:
    """The .gitignore files between the enclosing repository's root and the workdir.

    Git applies them to the workdir's files too, so a workdir inside a monorepo gets the
    same view as `git status` there. Found by looking for `.git`, so git need not exist.
    """
    wd = workdir.resolve()
    if (wd / ".git").exists():
        return []
    ancestors: list[Path] = []
    for parent in wd.parents:
        ancestors.append(parent)
        if (parent / ".git").exists():
            break
    else:
        return []
    rules: list[IgnorePattern] = []
    for anc in reversed(ancestors):  # outermost first: nearer files win
        prefix = wd.relative_to(anc).as_posix() + "/"
        rules += _read_ignore_file(str(anc / ".gitignore"), "", prefix)
    return rules


def _link_escapes(rel: str, target: str) -> bool:
    if target.startswith("/"):
        return True
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(rel), target))
    return resolved == ".." or resolved.startswith("../")


def _walk(
    workdir: Path, inherited: list[IgnorePattern], overrides: list[IgnorePattern]
) -> list[_Entry]:
    """Every included path in archive order: depth first, names sorted, dirs first."""
    entries: list[_Entry] = []

    def visit(dir_abs: str, dir_rel: str, chain: list[IgnorePattern]) -> None:
        # Deeper .gitignore files come later so they win; .tauignore and the spec's
        # `exclude` (the overrides) come last so they win over any .gitignore.
        chain = chain + _read_ignore_file(os.path.join(dir_abs, ".gitignore"), dir_rel)
        rules = chain + overrides
        try:
            with os.scandir(dir_abs) as it:
                items = sorted(it, key=lambda e: e.name)
        except PermissionError as exc:
            raise UsageError(
                f"cannot read directory {dir_abs!r} of the workdir ({exc.strerror}); "
                f"exclude it with `exclude:` in tau.yaml or a .tauignore line"
            ) from exc
        for item in items:
            rel = f"{dir_rel}/{item.name}" if dir_rel else item.name
            if item.name in ALWAYS_SKIPPED or (not dir_rel and item.name == META_DIR):
                continue
            st = item.stat(follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                if not is_ignored(rules, rel, is_dir=False):
                    target = os.readlink(item.path)
                    if _link_escapes(rel, target):
                        raise UsageError(
                            f"symlink {rel} -> {target} points outside the workdir, so the "
                            f"snapshot cannot carry it; exclude it with `exclude:` in "
                            f"tau.yaml or a .tauignore line such as {rel!r}"
                        )
                    entries.append(_Entry(rel, item.path, "link", target=target))
            elif stat.S_ISDIR(st.st_mode):
                if not is_ignored(rules, rel, is_dir=True):
                    entries.append(_Entry(rel, item.path, "dir"))
                    visit(item.path, rel, chain)
                    if entries[-1].rel == rel and os.path.isfile(f"{item.path}/.gitignore"):
                        # Everything in it is ignored by its own .gitignore (`tau get`
                        # marks its downloads so): left out, as git leaves it out. An
                        # empty directory without one is kept.
                        entries.pop()
            elif stat.S_ISREG(st.st_mode) and not is_ignored(rules, rel, is_dir=False):
                entries.append(
                    _Entry(rel, item.path, "file", st.st_size, bool(st.st_mode & stat.S_IXUSR))
                )
            # Sockets, fifos and devices are never part of code.

    visit(str(workdir), "", inherited)
    return entries


def _too_large_message(workdir: Path, entries: list[_Entry], total: int, limit: int) -> str:
    sizes: dict[str, int] = {}
    for e in entries:
        if e.kind == "file":
            sizes[e.rel] = e.size
            if "/" in e.rel:
                top = e.rel.split("/", 1)[0] + "/"
                sizes[top] = sizes.get(top, 0) + e.size
    # A file that is all of its top-level directory would only repeat that line.
    for e in entries:
        top = e.rel.split("/", 1)[0] + "/"
        if e.kind == "file" and "/" in e.rel and sizes.get(top) == e.size:
            del sizes[e.rel]
    biggest = sorted(sizes.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    listing = "\n".join(f"  {_human(size):>10}  {path}" for path, size in biggest)
    example = biggest[0][0] if biggest else "data/"
    return (
        f"code snapshot of {workdir} is {_human(total)}, over the {_human(limit)} limit "
        f"({total} > {limit} bytes). Biggest paths:\n{listing}\n"
        f'Exclude what the run does not need with `exclude: ["{example}"]` in tau.yaml '
        f"or a line `{example}` in {workdir / '.tauignore'} (gitignore syntax)."
    )


def _git(args: list[str], cwd: str) -> bytes | None:
    env = dict(os.environ, GIT_OPTIONAL_LOCKS="0", GIT_TERMINAL_PROMPT="0", LC_ALL="C")
    try:
        result = subprocess.run(
            ["git", *args],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=_GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout if result.returncode == 0 else None


def _git_info(workdir: Path) -> tuple[dict[str, object], bytes] | None:
    """git.json content and ``git diff HEAD`` for the repo holding ``workdir``, if any."""
    if shutil.which("git") is None:
        return None
    top_out = _git(["rev-parse", "--show-toplevel"], str(workdir))
    if top_out is None:
        return None
    top = top_out.decode("utf-8", "surrogateescape").strip()
    commit_out = _git(["rev-parse", "--verify", "-q", "HEAD"], top)
    commit = commit_out.decode().strip() if commit_out else None
    branch_out = _git(["symbolic-ref", "--short", "-q", "HEAD"], top)
    branch = branch_out.decode("utf-8", "surrogateescape").strip() if branch_out else None
    diff = b""
    if commit is not None:
        diff = _git(["diff", "HEAD", "--no-color", "--no-ext-diff"], top) or b""
    status = _git(["status", "--porcelain", "--untracked-files=no"], top) or b""
    untracked_out = _git(["ls-files", "--others", "--exclude-standard", "-z"], top) or b""
    untracked = sorted(
        p.decode("utf-8", "surrogateescape") for p in untracked_out.split(b"\0") if p
    )
    info: dict[str, object] = {
        "commit": commit,
        "branch": branch,
        "dirty": bool(status.strip()),  # tracked changes only, as `git describe --dirty`
        "untracked": untracked,
        "path": os.path.relpath(os.path.realpath(workdir), os.path.realpath(top)),
    }
    return info, diff


class _HashingWriter:
    """File wrapper that hashes and counts the bytes written through it."""

    def __init__(self, f: BinaryIO) -> None:
        self._f = f
        self.sha = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes, /) -> int:
        self.sha.update(data)
        self.size += len(data)
        return self._f.write(data)

    def flush(self) -> None:
        self._f.flush()


def _tarinfo(name: str, kind: bytes, mode: int, size: int = 0, target: str = "") -> tarfile.TarInfo:
    # Owner, group and time are fixed so the bytes depend only on content.
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.size = size
    info.linkname = target
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def _write_archive(
    out: _HashingWriter,
    entries: list[_Entry],
    extra: list[tuple[str, bytes]],
    progress: ArchiveProgress | None = None,
) -> None:
    counted = [e for e in entries if e.kind != "dir"]
    files_total, bytes_total = len(counted), sum(e.size for e in counted)
    files = done = 0

    def read(n: int) -> None:
        nonlocal done
        done += n
        if progress is not None:
            progress(files, done, files_total, bytes_total)

    if progress is not None:
        progress(0, 0, files_total, bytes_total)
    with (
        gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0, compresslevel=6) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for e in entries:
            if e.kind == "dir":
                tar.addfile(_tarinfo(e.rel, tarfile.DIRTYPE, 0o755))
                continue
            if e.kind == "link":
                tar.addfile(_tarinfo(e.rel, tarfile.SYMTYPE, 0o777, target=e.target))
            else:
                mode = 0o755 if e.executable else 0o644
                try:
                    with open(e.abs, "rb") as f:
                        size = os.fstat(f.fileno()).st_size
                        src = f if progress is None else _CountingReader(f, read)
                        tar.addfile(_tarinfo(e.rel, tarfile.REGTYPE, mode, size), src)
                except OSError as exc:
                    raise TauError(f"cannot snapshot {e.rel}: {exc}") from exc
            files += 1
            read(0)
        if extra:
            tar.addfile(_tarinfo(META_DIR, tarfile.DIRTYPE, 0o755))
        for name, data in extra:
            info = _tarinfo(f"{META_DIR}/{name}", tarfile.REGTYPE, 0o644, len(data))
            tar.addfile(info, _BytesReader(data))


class _CountingReader:
    """A file's reads, each told to ``on_read`` (its size) for progress."""

    def __init__(self, f: BinaryIO, on_read: Callable[[int], None]) -> None:
        self._f = f
        self._on_read = on_read

    def read(self, n: int = -1) -> bytes:
        data = self._f.read(n)
        self._on_read(len(data))
        return data


class _BytesReader:
    def __init__(self, data: bytes) -> None:
        self._data = data
        self._pos = 0

    def read(self, n: int = -1) -> bytes:
        end = len(self._data) if n < 0 else self._pos + n
        chunk = self._data[self._pos : end]
        self._pos += len(chunk)
        return chunk


def create_snapshot(
    workdir: Path,
    exclude: Sequence[str],
    store_dir: Path,
    max_bytes: int = DEFAULT_MAX_BYTES,
    progress: ArchiveProgress | None = None,
) -> SnapshotInfo:
    """Archive ``workdir`` into ``store_dir``, honouring exclude/.gitignore/.tauignore.

    Raises SnapshotTooLarge (writing nothing) when the included files exceed ``max_bytes``.
    ``progress``, when given, is told how far the archive has come (see ArchiveProgress).
    """
    workdir = Path(workdir)
    if not workdir.is_dir():
        raise UsageError(f"workdir {workdir} is not a directory")
    overrides = _read_ignore_file(str(workdir / ".tauignore"), "")
    overrides += parse_patterns(exclude, "")
    entries = _walk(workdir, _ancestor_rules(workdir), overrides)
    files = [e for e in entries if e.kind == "file"]
    content_bytes = sum(e.size for e in files)
    if content_bytes > max_bytes:
        raise SnapshotTooLarge(_too_large_message(workdir, entries, content_bytes, max_bytes))

    extra: list[tuple[str, bytes]] = []
    git = _git_info(workdir)
    if git is not None:
        extra.append(("git.diff", git[1]))
        extra.append(("git.json", (json.dumps(git[0], indent=2, sort_keys=True) + "\n").encode()))
    members = len(entries) + (len(extra) + 1 if extra else 0)  # META_DIR and its files
    if members > MAX_SNAPSHOT_MEMBERS:
        raise SnapshotTooLarge(
            f"code snapshot of {workdir} has {len(entries)} files and directories, over the "
            f"{MAX_SNAPSHOT_MEMBERS} limit; exclude what the run does not need with "
            f"`exclude:` in tau.yaml or {workdir / '.tauignore'} (gitignore syntax)"
        )

    store_dir = Path(store_dir)
    store_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=".snapshot-", suffix=".tmp", dir=store_dir)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as f:
            out = _HashingWriter(f)
            _write_archive(out, entries, extra, progress)
            f.flush()
            os.fsync(f.fileno())
        digest = out.sha.hexdigest()
        final = store_dir / f"{digest}.tar.gz"
        if final.exists():
            tmp.unlink()  # same content already stored: keep the existing file
        else:
            os.chmod(tmp, 0o600)  # code is private to its owner, like all of TAU_HOME
            os.replace(tmp, final)
            fsync_dir(store_dir)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return SnapshotInfo(
        digest=digest,
        path=final,
        size_bytes=out.size,
        file_count=sum(1 for e in entries if e.kind != "dir"),
        content_bytes=content_bytes,
        git=git[0] if git is not None else None,
    )


def _shown(name: str) -> str:
    """A member path for an error message: quoted (no control characters reach a
    terminal) and cut short."""
    return repr(name if len(name) <= 200 else name[:200] + "...")


def _check_member(member: tarfile.TarInfo) -> None:
    name = member.name
    parts = PurePosixPath(name).parts
    if name.startswith("/") or not parts or ".." in parts:
        raise SnapshotInvalid(f"unsafe path {_shown(name)} in snapshot archive")
    if member.issym():
        if _link_escapes(name.rstrip("/"), member.linkname):
            raise SnapshotInvalid(
                f"symlink {_shown(name)} in snapshot archive points outside the workdir"
            )
    elif not (member.isreg() or member.isdir()):
        raise SnapshotInvalid(
            f"unsupported member {_shown(name)} (type {member.type!r}) in snapshot archive: "
            "only files, directories and symlinks inside the workdir"
        )


def check_archive(path: Path, max_content_bytes: int = MAX_SNAPSHOT_BYTES) -> None:
    """Refuse what :func:`unpack_snapshot` would refuse at launch, before a run uses it.

    One streaming pass over the members (nothing is extracted, and members are not kept):
    :class:`SnapshotInvalid` names the first unsafe member (an absolute path, ``..``, a
    symlink leaving the workdir, a hard link, a device or fifo) and never its content;
    :class:`SnapshotTooLarge` when the files would unpack to more than
    ``max_content_bytes`` or there are more than ``MAX_SNAPSHOT_MEMBERS`` members (a
    decompression bomb stops there, before the rest is inflated).
    """
    content = count = 0
    try:
        with tarfile.open(path, "r|gz") as tar:
            while (member := tar.next()) is not None:
                # A TarFile keeps every header it has read (not in the type stubs).
                tar.members.clear()  # type: ignore[attr-defined]
                count += 1
                _check_member(member)
                content += member.size if member.isreg() else 0
                if content > max_content_bytes:
                    raise SnapshotTooLarge(
                        f"snapshot files unpack to more than the server's "
                        f"{_human(max_content_bytes)} limit"
                    )
                if count > MAX_SNAPSHOT_MEMBERS:
                    raise SnapshotTooLarge(
                        f"snapshot has more than the server's {MAX_SNAPSHOT_MEMBERS} members"
                    )
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise SnapshotInvalid(
            f"snapshot is not a valid tar.gz archive ({type(exc).__name__})"
        ) from None


def unpack_snapshot(archive: Path, dest: Path) -> None:
    """Extract ``archive`` to the new directory ``dest`` (all or nothing).

    Rejects absolute paths, ``..``, links leaving ``dest``, hard links and devices. File
    times are set to now: zero times break tools that build zips (wheels) from the tree.
    """
    dest = Path(dest)
    if dest.exists() or dest.is_symlink():
        raise TauError(f"cannot unpack snapshot into {dest}: it already exists")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent))
    now = time.time()

    def data_filter_now(member: tarfile.TarInfo, path: str) -> tarfile.TarInfo:
        # The stdlib "data" filter re-checks paths and links and keeps exec bits.
        return tarfile.data_filter(member, path).replace(mtime=now, deep=False)

    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = tar.getmembers()
            for member in members:
                _check_member(member)
            tar.extractall(tmp, members=members, filter=data_filter_now)
        os.chmod(tmp, 0o755)
        os.rename(tmp, dest)
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise TauError(f"snapshot archive {archive} is corrupt or unsafe: {exc}") from exc
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def verify_archive(path: Path, digest: str) -> bool:
    """Whether the file at ``path`` exists and its sha256 is ``digest``."""
    sha = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            while chunk := f.read(_CHUNK):
                sha.update(chunk)
    except OSError:
        return False
    return sha.hexdigest() == digest.lower()
