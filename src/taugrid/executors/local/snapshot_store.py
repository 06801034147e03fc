"""Code snapshots on this machine's disk, for the local artifact store: an upload is
streamed to a temporary file while it is hashed, refused the moment it passes the size
limit, checked as an archive, and only then stored, once, under its sha256
(``<root>/<sha256>.tar.gz``).

Nothing here holds an upload in memory: the route hands the body over piece by piece as
the server receives it (tens of KiB each).
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path

from taugrid.domain.submit_limits import MAX_SNAPSHOT_BYTES
from taugrid.errors import NotFound, SnapshotTooLarge, UsageError
from taugrid.fsdurable import fsync_dir
from taugrid.ports.artifacts import OpenedFile
from taugrid.workdir.snapshot import check_archive

_DIGEST = re.compile(r"^[0-9a-f]{64}$")
_PART_PREFIX = ".upload-"
_PART_SUFFIX = ".part"


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


class SnapshotFiles:
    """The snapshot store of one server (``$TAU_HOME/snapshots``)."""

    def __init__(self, root: Path, max_bytes: int = MAX_SNAPSHOT_BYTES) -> None:
        self.root = root
        self.max_bytes = max_bytes
        # One server per home (server.lock): at start no upload is in flight, so any
        # partial file was left by a server that died mid-upload.
        for part in root.glob(f"{_PART_PREFIX}*{_PART_SUFFIX}"):
            part.unlink(missing_ok=True)

    def path(self, digest: str) -> Path:
        if not _DIGEST.match(digest):
            raise UsageError("snapshot digest must be 64 lowercase hex characters")
        return self.root / f"{digest}.tar.gz"

    def exists(self, digest: str) -> bool:
        return self.path(digest).is_file()

    def open(self, digest: str) -> OpenedFile:
        try:
            f = self.path(digest).open("rb")
        except FileNotFoundError:
            raise NotFound(f"no code snapshot {digest[:12]} on this server") from None
        return OpenedFile(f, os.fstat(f.fileno()).st_size)

    def begin(self, digest: str, declared_bytes: int | None) -> SnapshotUpload:
        """An upload of ``digest``; a declared length over the limit is refused before a
        byte of the body is read."""
        final = self.path(digest)
        if declared_bytes is not None and declared_bytes > self.max_bytes:
            raise SnapshotTooLarge(
                f"snapshot archive is {_mib(declared_bytes)}, over the server's "
                f"{_mib(self.max_bytes)} limit; exclude what the run does not need "
                "(`exclude:` in tau.yaml or a .tauignore file)"
            )
        return SnapshotUpload(final, digest, self.max_bytes)


class SnapshotUpload:
    """One upload on its way to disk: :meth:`write` the body piece by piece, then
    :meth:`finish`; :meth:`discard` removes whatever is left (always call it)."""

    def __init__(self, final: Path, digest: str, max_bytes: int) -> None:
        self.final = final
        self.digest = digest
        self.max_bytes = max_bytes
        self.size = 0
        self._sha = hashlib.sha256()
        final.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=_PART_PREFIX, suffix=_PART_SUFFIX, dir=final.parent)
        self._tmp = Path(name)
        self._out = os.fdopen(fd, "wb")

    def write(self, data: bytes) -> None:
        self.size += len(data)
        if self.size > self.max_bytes:
            raise SnapshotTooLarge(
                f"snapshot archive is over the server's {_mib(self.max_bytes)} limit; "
                "exclude what the run does not need (`exclude:` in tau.yaml or a .tauignore "
                "file)"
            )
        self._sha.update(data)
        self._out.write(data)

    def finish(self) -> None:
        """Keep the upload when its bytes are the digest and a safe archive; the same
        content already stored is simply replaced by the identical bytes."""
        self._out.flush()
        os.fsync(self._out.fileno())
        self._out.close()
        if self._sha.hexdigest() != self.digest:
            raise UsageError(f"snapshot content does not match its digest {self.digest}")
        check_archive(self._tmp, self.max_bytes)
        os.replace(self._tmp, self.final)
        fsync_dir(self.final.parent)

    def discard(self) -> None:
        if not self._out.closed:
            self._out.close()
        self._tmp.unlink(missing_ok=True)
