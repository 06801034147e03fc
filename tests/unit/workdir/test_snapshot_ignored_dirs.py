"""A directory whose own .gitignore ignores all it holds (what `tau get` writes) is left
out of the snapshot, as git leaves it out; an empty directory without one stays."""

from __future__ import annotations

import tarfile
from pathlib import Path

from taugrid.cli.commands.get import DOWNLOAD_IGNORE
from taugrid.workdir.snapshot import create_snapshot


def names(archive: Path) -> list[str]:
    with tarfile.open(archive, "r:gz") as tar:
        return tar.getnames()


def test_a_download_dir_leaves_the_snapshot_unchanged(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text("print(1)\n")
    (work / "empty").mkdir()
    before = create_snapshot(work, [], tmp_path / "store")
    dl = work / "quickstart-x7k2p"
    (dl / "ckpt").mkdir(parents=True)
    (dl / ".gitignore").write_text(DOWNLOAD_IGNORE)
    (dl / "model.npz").write_bytes(b"m" * 1000)
    (dl / "ckpt" / "state.bin").write_bytes(b"s" * 10)
    after = create_snapshot(work, [], tmp_path / "store")
    assert after.digest == before.digest
    assert "empty" in names(after.path)  # kept: no .gitignore says to drop it
    # A .gitignore that keeps some files keeps the directory and those files.
    (dl / ".gitignore").write_text("*.npz\n")
    kept = names(create_snapshot(work, [], tmp_path / "store").path)
    assert "quickstart-x7k2p/ckpt/state.bin" in kept and "quickstart-x7k2p/model.npz" not in kept
