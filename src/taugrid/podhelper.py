"""What TauGrid runs inside a cluster pod beside the user's image: ``python -m
taugrid.podhelper fetch-code``, the init container that puts the run's code snapshot in
the working directory (``manifests.workloads`` renders it); with a workspace's
``storage.url``, ``fetch-resume`` (an init container) and ``sync-checkpoints`` (a native
sidecar), which move checkpoints and outputs between the pod and the bucket
(``taugrid.podstorage``, imported only for them: fsspec is not loaded for ``fetch-code``);
``report``, the native sidecar that sends the attempt's metrics and the checkpoints it
sees to the server (``taugrid.podreport``).

From its environment: ``TAU_SNAPSHOT_URL`` (the server's snapshot endpoint),
``TAU_SNAPSHOT_SHA256`` (the digest the run was submitted with), ``TAU_SNAPSHOT_TOKEN``
(the attempt's read-only token, from its Secret) and ``TAU_CODE_DIR`` (the emptyDir
mounted as the working directory). The archive is streamed to that volume while it is
hashed (the root filesystem is read-only), refused unless its sha256 is the digest,
checked member by member as the server checks an upload, and unpacked all or nothing.
A failure exits non-zero with one line naming what went wrong, so the pod's
``Init:Error`` says why; the token never appears in it.

Standard library and ``taugrid.workdir`` only at import: it starts in every pod of
every run.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from taugrid.errors import TauError
from taugrid.workdir.snapshot import check_archive, unpack_snapshot

_CHUNK = 1 << 20
ATTEMPTS = 5  # a server restarting (a rollout) answers again within seconds
STAGING = ".tau-unpack"


class FetchError(TauError):
    code = "code_fetch_failed"


def _env(name: str) -> str:
    value = os.environ.get(name, "")
    if not value:
        raise FetchError(f"{name} is not set (this runs as a TauGrid pod's init container)")
    return value


def _download(url: str, token: str, dest: Path, timeout_s: float) -> str:
    """Stream ``url`` to ``dest``; the sha256 of what arrived."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    sha = hashlib.sha256()
    with urllib.request.urlopen(request, timeout=timeout_s) as response, open(dest, "wb") as f:
        while chunk := response.read(_CHUNK):
            sha.update(chunk)
            f.write(chunk)
    return sha.hexdigest()


def fetch_code(url: str, digest: str, token: str, code_dir: Path, timeout_s: float = 60.0) -> int:
    """Fetch, verify and unpack the snapshot into ``code_dir``; the number of entries."""
    # The volume is this pod's own: what a restarted init container left there goes.
    for leftover in code_dir.iterdir():
        if leftover.is_dir() and not leftover.is_symlink():
            shutil.rmtree(leftover)
        else:
            leftover.unlink()
    archive = code_dir / ".tau-snapshot.tar.gz"
    last: str = ""
    for attempt in range(ATTEMPTS):
        try:
            got = _download(url, token, archive, timeout_s)
            break
        except urllib.error.HTTPError as exc:
            if exc.code in (401, 403, 404):  # no retry makes a refused token good
                raise FetchError(
                    f"the server refused the code snapshot ({exc.code} {exc.reason}) at {url}"
                ) from None
            last = f"{exc.code} {exc.reason}"
        except (urllib.error.URLError, OSError) as exc:
            last = str(getattr(exc, "reason", exc))
        time.sleep(min(2**attempt, 10))
    else:
        archive.unlink(missing_ok=True)
        raise FetchError(f"cannot fetch the code snapshot from {url}: {last}")
    try:
        if got != digest.lower():
            raise FetchError(f"the code snapshot's sha256 is {got}, not the submitted {digest}")
        check_archive(archive)
        staging = code_dir / STAGING
        unpack_snapshot(archive, staging)
    finally:
        archive.unlink(missing_ok=True)
    # The volume's mount point cannot be renamed into: move what is in it instead.
    entries = list(staging.iterdir())
    for entry in entries:
        os.replace(entry, code_dir / entry.name)
    staging.rmdir()
    return len(entries)


STORAGE_COMMANDS = ("fetch-resume", "sync-checkpoints")


def main(argv: list[str]) -> int:
    if argv == ["report"]:
        from taugrid import podreport

        return podreport.run()
    if len(argv) == 1 and argv[0] in STORAGE_COMMANDS:
        from taugrid import podstorage  # fsspec and s3fs only where they are used

        return podstorage.run_command(argv[0])
    if argv != ["fetch-code"]:
        print(
            "usage: python -m taugrid.podhelper fetch-code|fetch-resume|sync-checkpoints|report",
            file=sys.stderr,
        )
        return 2
    try:
        n = fetch_code(
            _env("TAU_SNAPSHOT_URL"),
            _env("TAU_SNAPSHOT_SHA256"),
            _env("TAU_SNAPSHOT_TOKEN"),
            Path(_env("TAU_CODE_DIR")),
        )
    except TauError as exc:
        print(f"tau: {exc.message}", file=sys.stderr)
        return 1
    print(f"tau: code snapshot unpacked ({n} entries)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
