"""What a stored code snapshot holds: one entry per file and symlink, with size and sha256.

``tau diff`` compares two runs' snapshots with it (added, removed, changed files). A
snapshot is content-addressed and never changes, so a listing is computed once per
digest (one streaming pass, each file hashed as it is inflated) and kept in a small
cache. The archive was checked at upload (``workdir/snapshot.check_archive``:
safe members, bounded size and count), so the pass is bounded too.
"""

from __future__ import annotations

import gzip
import hashlib
import tarfile
import threading
import zlib
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from taugrid.domain.submit_limits import MAX_SNAPSHOT_MEMBERS
from taugrid.errors import SnapshotInvalid
from taugrid.workdir.snapshot import META_DIR

CACHED_LISTINGS = 16
# Entries kept over all cached listings: what one snapshot of the most members holds, so
# many large snapshots cannot make the cache grow past that (well under 100 MiB).
CACHED_MEMBERS = MAX_SNAPSHOT_MEMBERS
_CHUNK = 1 << 20

Member = dict[str, Any]  # {"path", "type": "file"|"symlink", "size", "sha256"}


def list_members(archive: Path | IO[bytes]) -> list[Member]:
    """Files and symlinks of ``archive`` in path order (directories and TauGrid's own
    ``.tau-snapshot/`` metadata left out). A symlink's size is 0 and its sha256 that of
    its target text, so a link pointed elsewhere counts as changed."""
    out: list[Member] = []
    try:
        where: dict[str, Any] = (
            {"name": archive} if isinstance(archive, Path) else {"fileobj": archive}
        )
        with tarfile.open(mode="r|gz", **where) as tar:
            while (member := tar.next()) is not None:
                tar.members.clear()  # type: ignore[attr-defined]  # headers read so far
                name = member.name.rstrip("/")
                if name == META_DIR or name.startswith(META_DIR + "/"):
                    continue
                if member.issym():
                    digest = hashlib.sha256(member.linkname.encode("utf-8", "surrogateescape"))
                    out.append(_entry(name, "symlink", 0, digest.hexdigest()))
                elif member.isreg():
                    out.append(_entry(name, "file", member.size, _hash(tar, member)))
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
        kind = type(exc).__name__
        raise SnapshotInvalid(f"snapshot is not a valid tar.gz archive ({kind})") from None
    out.sort(key=lambda m: str(m["path"]))
    return out


def _entry(path: str, kind: str, size: int, sha256: str) -> Member:
    return {"path": path, "type": kind, "size": size, "sha256": sha256}


def _hash(tar: tarfile.TarFile, member: tarfile.TarInfo) -> str:
    sha = hashlib.sha256()
    f = tar.extractfile(member)
    if f is not None:
        with f:
            while chunk := f.read(_CHUNK):
                sha.update(chunk)
    return sha.hexdigest()


class SnapshotListings:
    """Listings by digest, the most recently used kept: at most :data:`CACHED_LISTINGS`
    and :data:`CACHED_MEMBERS` entries in all (a listing of a big snapshot costs a pass
    over its bytes; the same two runs are often diffed again)."""

    def __init__(self, size: int = CACHED_LISTINGS, members: int = CACHED_MEMBERS) -> None:
        self._size = size
        self._members = members
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, list[Member]] = OrderedDict()

    def get(self, digest: str, archive: Path | Callable[[], IO[bytes]]) -> list[Member]:
        """The listing of ``digest``, from the cache or read from ``archive`` (a path, or
        a function that opens the archive: it is opened only when not cached)."""
        with self._lock:
            if digest in self._cache:
                self._cache.move_to_end(digest)
                return self._cache[digest]
        # Outside the lock: other digests go on meanwhile.
        if isinstance(archive, Path):
            listing = list_members(archive)
        else:
            with archive() as f:
                listing = list_members(f)
        with self._lock:
            self._cache[digest] = listing
            self._cache.move_to_end(digest)
            while len(self._cache) > self._size or (
                len(self._cache) > 1 and sum(map(len, self._cache.values())) > self._members
            ):
                self._cache.popitem(last=False)
        return listing
