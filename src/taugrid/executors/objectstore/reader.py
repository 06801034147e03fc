"""A run's checkpoints and outputs in object storage, for the server: the checkpoint and
output methods of the ``ArtifactStore`` port (``taugrid.ports.artifacts``).

The rules are the SDK's, not a copy of them: the manifest is parsed by
``parse_manifest``, each file judged by ``entry_problem``/``digest_problem``, and the
resume point walked by ``pick_resume``; only where the bytes come from differs. "Verified
in full" re-hashes every object, streamed (never held in memory).

Nothing in the bucket is trusted (the workload's sidecar wrote it): only canonical
``step-%010d`` prefixes count, a manifest past ``MANIFEST_MAX`` is refused unread, keys
that are not plain relative paths are ignored, and a name asked for is checked before it
becomes a key. A missing checkpoint or file is ``NotFound``; storage that cannot be used
is a ``StorageError`` in one line without credentials.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, BinaryIO, cast

from taugrid.errors import NotFound, TauError
from taugrid.objfs import Location, describe, open_fs
from taugrid.ports.artifacts import OpenedFile
from taugrid.sdk._store import (
    MANIFEST,
    CheckpointInfo,
    FileEntry,
    digest_problem,
    entry_problem,
    info_from_manifest,
    parse_manifest,
    parse_step_dir,
    pick_resume,
)

MANIFEST_MAX = 64 << 20  # a manifest lists files; one this big is not the SDK's
_CHUNK = 1 << 20

Listing = dict[str, int]  # relative key -> size, of one checkpoint's objects


class ObjectStoreArtifacts:
    """Checkpoints and outputs of runs under ``loc`` (``fs``: an fsspec filesystem, made
    from ``loc`` and the credentials when not given)."""

    def __init__(
        self,
        loc: Location,
        *,
        key: str | None = None,
        secret: str | None = None,
        fs: Any = None,
    ) -> None:
        self.loc = loc
        self._secrets = (key, secret)
        self.fs = fs if fs is not None else open_fs(loc, key, secret)

    # -- checkpoints ----------------------------------------------------------------------
    def checkpoints(self, run_id: str, *, full: bool = False) -> list[CheckpointInfo]:
        """Newest step first; ``full`` hashes every object, otherwise the manifest,
        presence and sizes are checked."""
        return [self._inspect(d, step, full) for step, d in self._step_dirs(run_id)]

    def resume_point(
        self, run_id: str, *, fault_at: float | None = None
    ) -> tuple[CheckpointInfo | None, list[CheckpointInfo]]:
        """The newest checkpoint that verifies in full and was written before
        ``fault_at``, and the newer ones skipped (each with its ``problem``)."""
        return pick_resume(
            self._step_dirs(run_id),
            self._inspect,
            exclude_written_after=fault_at,
            full=True,
        )

    def open_checkpoint_file(self, run_id: str, step: int, rel: str) -> OpenedFile:
        found = [c for c in self.checkpoints(run_id) if c.step == step]
        what = f"checkpoint step {step} of run {run_id}"
        if not found:
            raise NotFound(f"run {run_id} has no checkpoint at step {step}")
        if rel != MANIFEST and rel not in {f.path for f in found[0].files}:
            raise NotFound(f"{what} has no file '{rel}'")
        return self._open(f"{self.loc.checkpoints(run_id)}/{found[0].path.name}/{rel}", what)

    # -- outputs --------------------------------------------------------------------------
    def outputs(self, run_id: str) -> list[tuple[str, int]]:
        """(relative path, size) of each output object, sorted; empty when none."""
        listing = self._find(self.loc.outputs(run_id), "listing the outputs")
        return sorted(listing.items())

    def open_output(self, run_id: str, rel: str) -> OpenedFile:
        what = f"run {run_id}"
        if not _plain(rel):
            raise NotFound(f"{what} has no output '{rel}'")
        return self._open(f"{self.loc.outputs(run_id)}/{rel}", f"output '{rel}' of {what}")

    # -- reading the bucket ---------------------------------------------------------------
    def _step_dirs(self, run_id: str) -> list[tuple[int, tuple[str, Listing]]]:
        """Each canonical step prefix with its objects, newest first: one listing for
        the run, so a resume point costs one LIST plus the manifests it reads."""
        root = self.loc.checkpoints(run_id)
        by_dir: dict[str, Listing] = {}
        for rel, size in self._find(root, "listing the checkpoints").items():
            name, sep, inner = rel.partition("/")
            if sep and parse_step_dir(name) is not None:
                by_dir.setdefault(name, {})[inner] = size
        dirs = [(parse_step_dir(n), (f"{root}/{n}", files)) for n, files in by_dir.items()]
        return sorted(((s, d) for s, d in dirs if s is not None), key=lambda sd: -sd[0])

    def _find(self, prefix: str, what: str) -> Listing:
        """Every object under ``prefix`` as relative key -> size; keys that are not a
        plain relative path (directory markers, '..', empty parts) are left out."""
        try:
            # An absent prefix lists as nothing; FileNotFoundError means no bucket.
            found = self.fs.find(prefix, detail=True)
        except Exception as exc:
            raise describe(exc, self.loc, what, self._secrets) from None
        out: Listing = {}
        for key, info in found.items():
            rel = key[len(prefix) + 1 :] if key.startswith(prefix + "/") else None
            if rel is None or info.get("type") != "file":
                continue
            if _plain(rel):
                out[rel] = int(info.get("size") or 0)
        return out

    def _inspect(self, where: tuple[str, Listing], step: int, full: bool) -> CheckpointInfo:
        key, listing = where
        path = Path(key)
        size = listing.get(MANIFEST)
        if size is None:
            return info_from_manifest(path, step, None, f"missing manifest {MANIFEST}", _none)
        if size > MANIFEST_MAX:
            too_big = f"manifest {MANIFEST} is {size} bytes, over {MANIFEST_MAX}"
            return info_from_manifest(path, step, None, too_big, _none)
        try:
            raw = self.fs.cat_file(f"{key}/{MANIFEST}")
        except FileNotFoundError:  # removed since the listing
            return info_from_manifest(path, step, None, f"missing manifest {MANIFEST}", _none)
        except Exception as exc:
            raise describe(exc, self.loc, "reading a manifest", self._secrets) from None
        manifest, problem = parse_manifest(raw)
        return info_from_manifest(
            path, step, manifest, problem, lambda files: self._check(key, listing, files, full)
        )

    def _check(
        self, key: str, listing: Listing, entries: Sequence[FileEntry], full: bool
    ) -> str | None:
        for f in entries:
            problem = entry_problem(f, listing.get(f.path))
            if problem is not None:
                return problem
        if not full:
            return None
        for f in entries:
            try:
                sha = self._sha256(f"{key}/{f.path}")
            except FileNotFoundError:
                return entry_problem(f, None)
            problem = digest_problem(f, sha)
            if problem is not None:
                return problem
        return None

    def _sha256(self, key: str) -> str:
        h = hashlib.sha256()
        try:
            with self.fs.open(key, "rb", block_size=8 * _CHUNK) as f:
                while chunk := f.read(_CHUNK):
                    h.update(chunk)
        except FileNotFoundError:
            raise
        except Exception as exc:
            raise describe(exc, self.loc, "reading a checkpoint file", self._secrets) from None
        return h.hexdigest()

    def _open(self, key: str, what: str) -> OpenedFile:
        try:
            info = self.fs.info(key)
            if info.get("type") != "file":
                raise NotFound(f"{what} is not a file")
            return OpenedFile(cast(BinaryIO, self.fs.open(key, "rb")), int(info["size"]))
        except FileNotFoundError:
            raise NotFound(f"{what} is not in the bucket") from None
        except TauError:
            raise
        except Exception as exc:
            raise describe(exc, self.loc, f"opening {what}", self._secrets) from None


def _none(_files: object) -> str | None:
    return None


def _plain(rel: str) -> bool:
    """A relative key without empty, '.' or '..' parts: what the sidecar uploads."""
    return (
        bool(rel)
        and "\\" not in rel
        and "\0" not in rel
        and all(part not in ("", ".", "..") for part in rel.split("/"))
    )
