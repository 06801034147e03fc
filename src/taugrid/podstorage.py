"""The pod's side of object storage (``python -m taugrid.podhelper sync-checkpoints`` and
``fetch-resume``): the workload's SDK writes checkpoints to a local directory (an
emptyDir at ``/tau/run``) and these move them to and from ``<storage url>/runs/<id>/``.

``sync-checkpoints`` runs as a native sidecar (an init container with ``restartPolicy:
Always``): every few seconds it uploads each checkpoint the SDK has committed (a
``step-%010d`` directory: the SDK renames a checkpoint there only once it is complete)
and not uploaded yet. The files go first, each hashed while it streams and compared with
the manifest (a checkpoint pruned or replaced meanwhile is dropped, and tried again next
pass); the manifest goes last, so a reader never sees a checkpoint whose manifest is
there before its files. A checkpoint the SDK pruned (``keep``) after this sidecar
uploaded it is removed from the bucket too, manifest first. On SIGTERM (the workload
has ended, or the pod is stopping) one last pass runs, then the outputs are uploaded.

``fetch-resume`` runs as an init container before the workload: it downloads the
checkpoint the server chose (``TAU_RESUME_STEP``, a step directory name) into the local
checkpoint directory, every file checked against the manifest's sha256, written into a
temporary sibling and renamed into place complete, as the SDK does.

fsspec is imported only inside these commands (``taugrid.objfs``): ``fetch-code`` stays
as light as before.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import stat
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from taugrid.errors import TauError
from taugrid.objfs import Location, StorageError, describe, open_fs
from taugrid.sdk._store import MANIFEST, parse_manifest, parse_step_dir, step_dirs

_CHUNK = 1 << 20
FETCH_PREFIX = ".tmp-fetch-"


class SyncError(TauError):
    code = "checkpoint_sync_failed"


def _log(message: str) -> None:
    print(f"tau: {message}", file=sys.stderr, flush=True)


def _open_regular(path: Path) -> BinaryIO:
    """``path`` opened for reading, refused unless it is a regular file (no link is
    followed: the workload could plant one pointing anywhere in the pod)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    f = os.fdopen(fd, "rb")
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        f.close()
        raise OSError(f"{path} is not a regular file")
    return f


def _read_regular(path: Path) -> bytes:
    with _open_regular(path) as f:
        return f.read()


def _upload(fs: Any, src: Path, key: str) -> tuple[int, str]:
    """Stream ``src`` to ``key``: (size, sha256) of what was sent. The local file is
    opened first, so one that cannot be read leaves no object behind."""
    h, n = hashlib.sha256(), 0
    with _open_regular(src) as f, fs.open(key, "wb") as out:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
            n += len(chunk)
            out.write(chunk)
    return n, h.hexdigest()


class CheckpointSync:
    """One pod's uploads: what it has sent (step -> the manifest's bytes) is kept so each
    checkpoint goes once; after a restart of the sidecar the bucket's manifests say it."""

    def __init__(self, fs: Any, loc: Location, run_id: str, local: Path) -> None:
        self.fs, self.loc, self.local = fs, loc, local
        self.remote = loc.checkpoints(run_id)
        self.sent: dict[str, bytes] = {}
        self.failed = 0
        self._warned: set[str] = set()

    def sync_once(self) -> list[str]:
        """Upload every committed checkpoint not in the bucket yet, oldest first; remove
        those pruned locally since. The step directories uploaded now. One that fails is
        said and left for the next pass, without holding back the others;
        ``self.failed`` counts this pass's failures."""
        uploaded = []
        self.failed = 0
        present = {p.name: p for _, p in step_dirs(self.local)}
        for name in sorted(present):
            if self._guarded(self._sync_one, name, present[name]):
                uploaded.append(name)
        for name in sorted(set(self.sent) - set(present)):
            self._guarded(self._remove, name)
        return uploaded

    def _guarded(self, job: Callable[..., bool | None], *args: Any) -> bool:
        try:
            return bool(job(*args))
        except StorageError as exc:
            self.failed += 1
            _log(exc.message)
            return False

    def _sync_one(self, name: str, path: Path) -> bool:
        try:
            raw = _read_regular(path / MANIFEST)
        except OSError:
            return False  # pruned or replaced since the scan: the next pass sees it
        if self.sent.get(name) == raw:
            return False
        manifest, problem = parse_manifest(raw)
        if manifest is None or manifest.step != parse_step_dir(name):
            if name not in self._warned:
                self._warned.add(name)
                _log(f"not uploading {name}: {problem or 'its step is not its name'}")
            return False
        key = f"{self.remote}/{name}"
        try:
            if self._remote_manifest(key) == raw:  # sent before a restart, or fetched
                self.sent[name] = raw
                return False
            # The old manifest of a replaced step goes first: its files change next.
            if self._exists(f"{key}/{MANIFEST}"):
                self.fs.rm_file(f"{key}/{MANIFEST}")
            for f in manifest.files:
                got = _upload(self.fs, path / f.path, f"{key}/{f.path}")
                if got != (f.size, f.sha256):
                    return False  # changed while it was read: not this checkpoint
            # The manifest still the one whose files were sent, uploaded last: the commit.
            if _read_regular(path / MANIFEST) != raw:
                return False
            self.fs.pipe_file(f"{key}/{MANIFEST}", raw)
        except OSError as exc:
            if isinstance(exc, (FileNotFoundError, NotADirectoryError)) and not path.exists():
                return False  # pruned by the SDK while being uploaded
            raise describe(exc, self.loc, f"uploading checkpoint {name}") from None
        except Exception as exc:
            raise describe(exc, self.loc, f"uploading checkpoint {name}") from None
        self.sent[name] = raw
        _log(f"checkpoint {name} uploaded ({len(manifest.files)} files)")
        return True

    def _remote_manifest(self, key: str) -> bytes | None:
        try:
            data: bytes = self.fs.cat_file(f"{key}/{MANIFEST}")
        except FileNotFoundError:
            return None
        return data

    def _exists(self, key: str) -> bool:
        try:
            self.fs.info(key)
        except FileNotFoundError:
            return False
        return True

    def _remove(self, name: str) -> None:
        key = f"{self.remote}/{name}"
        try:
            if self._exists(f"{key}/{MANIFEST}"):
                self.fs.rm_file(f"{key}/{MANIFEST}")  # no longer a checkpoint from here on
            self.fs.rm(key, recursive=True)
        except FileNotFoundError:
            pass
        except Exception as exc:
            raise describe(exc, self.loc, f"removing pruned checkpoint {name}") from None
        del self.sent[name]
        _log(f"checkpoint {name} removed (pruned by the SDK)")


def upload_outputs(fs: Any, loc: Location, run_id: str, local: Path) -> int:
    """Every regular file under ``local`` to ``<url>/runs/<id>/outputs/``; links and
    anything but plain files are skipped. The number of files uploaded."""
    n = 0
    if not local.is_dir():
        return 0
    for dirpath, dirnames, filenames in os.walk(local, followlinks=False):
        dirnames.sort()
        for fname in sorted(filenames):
            src = Path(dirpath) / fname
            rel = src.relative_to(local).as_posix()
            try:
                if not stat.S_ISREG(os.lstat(src).st_mode):
                    continue  # a link or a fifo the workload left: never followed
                _upload(fs, src, f"{loc.outputs(run_id)}/{rel}")
            except FileNotFoundError:
                if not src.exists():
                    continue  # removed while we walked
                raise describe(FileNotFoundError(), loc, f"uploading output {rel}") from None
            except Exception as exc:
                raise describe(exc, loc, f"uploading output {rel}") from None
            n += 1
    return n


def sync_checkpoints(
    loc: Location,
    run_id: str,
    checkpoints: Path,
    outputs: Path,
    *,
    interval_s: float = 5.0,
    stop: threading.Event | None = None,
) -> int:
    """The sidecar's loop until ``stop`` (SIGTERM): passes every ``interval_s``, one last
    pass, then the outputs (the number uploaded). A failure is said and retried next
    pass (the endpoint may be back); one in the last pass still lets the outputs go up,
    then is raised, so the container's exit status says it."""
    stop = stop or threading.Event()
    fs = open_fs(loc)
    sync = CheckpointSync(fs, loc, run_id, checkpoints)
    while not stop.is_set():
        sync.sync_once()
        stop.wait(interval_s)
    sync.sync_once()
    n = upload_outputs(fs, loc, run_id, outputs)
    _log(f"outputs uploaded ({n} files)")
    if sync.failed:
        raise SyncError(f"{sync.failed} checkpoint(s) could not be uploaded (said above)")
    return n


def fetch_resume(loc: Location, run_id: str, step_dir: str, checkpoints: Path) -> int:
    """Download checkpoint ``step_dir`` into ``checkpoints``, verified; its file count."""
    step = parse_step_dir(step_dir)
    if step is None:
        raise SyncError(f"TAU_RESUME_STEP {step_dir!r} is not a checkpoint directory name")
    fs = open_fs(loc)
    key = f"{loc.checkpoints(run_id)}/{step_dir}"
    try:
        raw = fs.cat_file(f"{key}/{MANIFEST}")
    except FileNotFoundError:
        raise SyncError(f"checkpoint {step_dir} of run {run_id} is not in {loc.url}") from None
    except Exception as exc:
        raise describe(exc, loc, f"fetching checkpoint {step_dir}") from None
    manifest, problem = parse_manifest(raw)
    if manifest is None or manifest.step != step:
        raise SyncError(f"checkpoint {step_dir}: {problem or 'its step is not its name'}")
    checkpoints.mkdir(parents=True, exist_ok=True)
    tmp = checkpoints / f"{FETCH_PREFIX}{step_dir}"
    shutil.rmtree(tmp, ignore_errors=True)  # what a restarted init container left
    try:
        for f in manifest.files:
            dest = tmp / f.path
            dest.parent.mkdir(parents=True, exist_ok=True)
            h, n = hashlib.sha256(), 0
            try:
                with fs.open(f"{key}/{f.path}", "rb") as src, open(dest, "xb") as out:
                    while chunk := src.read(_CHUNK):
                        h.update(chunk)
                        n += len(chunk)
                        out.write(chunk)
            except FileNotFoundError:
                raise SyncError(f"checkpoint {step_dir}: missing file {f.path}") from None
            except OSError as exc:
                raise describe(exc, loc, f"fetching checkpoint {step_dir}") from None
            if (n, h.hexdigest()) != (f.size, f.sha256):
                raise SyncError(f"checkpoint {step_dir}: sha256 mismatch of file {f.path}")
        (tmp / MANIFEST).write_bytes(raw)  # last, as the SDK commits
        final = checkpoints / step_dir
        shutil.rmtree(final, ignore_errors=True)
        # No fsync: the emptyDir dies with the pod, and a new pod fetches again.
        os.rename(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return len(manifest.files)


def _location() -> Location:
    url = os.environ.get("TAU_STORAGE_URL", "")
    if not url:
        raise SyncError("TAU_STORAGE_URL is not set (this runs in a TauGrid pod)")
    return Location(url, os.environ.get("TAU_STORAGE_ENDPOINT") or None)


def _env(name: str) -> str:
    value = os.environ.get(name, "")
    if not value:
        raise SyncError(f"{name} is not set (this runs in a TauGrid pod)")
    return value


def run_command(command: str) -> int:
    """``sync-checkpoints`` or ``fetch-resume`` from the environment; exit status."""
    try:
        loc = _location()
        run_id = _env("TAU_RUN_ID")
        checkpoints = Path(_env("TAU_CHECKPOINT_DIR"))
        if command == "fetch-resume":
            step_dir = os.environ.get("TAU_RESUME_STEP", "")
            if not step_dir:
                _log("no checkpoint to resume from: a fresh start")
                return 0
            n = fetch_resume(loc, run_id, step_dir, checkpoints)
            _log(f"checkpoint {step_dir} fetched ({n} files)")
            return 0
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        interval = float(os.environ.get("TAU_SYNC_INTERVAL", "5"))
        outputs = Path(_env("TAU_OUTPUT_DIR"))
        sync_checkpoints(loc, run_id, checkpoints, outputs, interval_s=interval, stop=stop)
        return 0
    except TauError as exc:
        _log(exc.message)
        return 1
