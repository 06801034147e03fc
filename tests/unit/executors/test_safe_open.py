"""Files of a run are opened beneath its directory without following any link."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from taugrid.errors import NotFound
from taugrid.executors.local.safe_open import open_beneath


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, 1 << 16)
    finally:
        os.close(fd)


def test_regular_files_open_and_nothing_else(tmp_path: Path) -> None:
    root = tmp_path / "outputs"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "model.bin").write_bytes(b"weights")
    secret = tmp_path / "token"
    secret.write_text("SECRET")
    (root / "link").symlink_to(secret)
    (root / "dirlink").symlink_to(tmp_path)
    os.mkfifo(root / "fifo")  # would block a plain open for ever
    assert _read(open_beneath(root, "sub/model.bin", "run r")) == b"weights"
    for rel in ("link", "dirlink/token", "fifo", "sub", "../token", "/etc/passwd", ".", ""):
        with pytest.raises(NotFound, match="run r has no file"):
            open_beneath(root, rel, "run r")


def test_the_root_itself_may_not_be_a_link(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "f").write_text("x")
    (tmp_path / "outputs").symlink_to(tmp_path / "real")
    with pytest.raises(NotFound):
        open_beneath(tmp_path / "outputs", "f", "run r")
