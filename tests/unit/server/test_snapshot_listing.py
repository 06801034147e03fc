"""The files of a stored snapshot, as `tau diff` compares them: a real archive of a real
workdir, made by the CLI's own snapshot code."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from taugrid.errors import SnapshotInvalid
from taugrid.server.snapshot_listing import SnapshotListings, list_members
from taugrid.workdir.snapshot import create_snapshot


def _workdir(root: Path) -> Path:
    work = root / "work"
    (work / "pkg").mkdir(parents=True)
    (work / "train.py").write_text("print('hi')\n")
    (work / "pkg" / "data.bin").write_bytes(b"\0" * 5000)
    os.symlink("train.py", work / "main.py")
    return work


def test_files_and_links_with_sizes_and_hashes_without_tau_metadata(tmp_path: Path) -> None:
    work = _workdir(tmp_path)
    subprocess.run(["git", "init", "-q", str(work)], check=True)  # .tau-snapshot/ gets git.json
    info = create_snapshot(work, [], tmp_path / "store")
    members = list_members(info.path)
    assert members == [
        {"path": "main.py", "type": "symlink", "size": 0,
         "sha256": hashlib.sha256(b"train.py").hexdigest()},
        {"path": "pkg/data.bin", "type": "file", "size": 5000,
         "sha256": hashlib.sha256(b"\0" * 5000).hexdigest()},
        {"path": "train.py", "type": "file", "size": 12,
         "sha256": hashlib.sha256(b"print('hi')\n").hexdigest()},
    ]  # fmt: skip


def test_listings_are_cached_by_digest(tmp_path: Path) -> None:
    info = create_snapshot(_workdir(tmp_path), [], tmp_path / "store")
    cache = SnapshotListings(size=1)
    first = cache.get(info.digest, info.path)
    info.path.unlink()  # content-addressed: the cached listing stays right
    assert cache.get(info.digest, info.path) is first
    with pytest.raises(OSError):
        cache.get("other", info.path)


def test_a_corrupt_archive_is_an_error_without_its_content(tmp_path: Path) -> None:
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(b"not gzip at all")
    with pytest.raises(SnapshotInvalid) as err:
        list_members(bad)
    assert "not gzip" not in err.value.message


def test_the_cache_is_bounded_by_members_too(tmp_path: Path) -> None:
    infos = []
    for i in range(3):
        work = tmp_path / f"w{i}"
        work.mkdir()
        for j in range(4):
            (work / f"f{j}").write_text(f"{i}-{j}")
        infos.append(create_snapshot(work, [], tmp_path / "store"))
    cache = SnapshotListings(size=10, members=8)  # two listings of 4 files fit
    listed = [cache.get(info.digest, info.path) for info in infos]
    infos[0].path.unlink()
    with pytest.raises(OSError):
        cache.get(infos[0].digest, infos[0].path)  # the oldest went out
    assert cache.get(infos[2].digest, infos[2].path) is listed[2]
