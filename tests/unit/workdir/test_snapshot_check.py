"""check_archive: what the server refuses at upload, before any run could use it."""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

import pytest

from taugrid.errors import SnapshotInvalid, SnapshotTooLarge
from taugrid.workdir import snapshot
from taugrid.workdir.snapshot import check_archive, create_snapshot

SECRET = b"file-content-never-shown"


def _archive(tmp_path: Path, *members: tarfile.TarInfo) -> Path:
    path = tmp_path / "a.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for info in members:
            data = SECRET if info.isreg() else b""
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data else None)
    return path


def _member(name: str, kind: bytes = tarfile.REGTYPE, target: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info


def test_a_snapshot_made_by_the_cli_passes(tmp_path: Path) -> None:
    work = tmp_path / "w"
    (work / "pkg").mkdir(parents=True)
    (work / "pkg" / "m.py").write_text("x = 1\n")
    (work / "link").symlink_to("pkg/m.py")
    info = create_snapshot(work, [], tmp_path / "store")
    check_archive(info.path)


@pytest.mark.parametrize(
    ("member", "said"),
    [
        (_member("esc", tarfile.SYMTYPE, "../../etc"), "'esc'"),
        (_member("abs", tarfile.SYMTYPE, "/etc/passwd"), "'abs'"),
        (_member("sub/deep", tarfile.SYMTYPE, "../../x"), "'sub/deep'"),
        (_member("hard", tarfile.LNKTYPE, "x"), "'hard'"),
        (_member("dev", tarfile.CHRTYPE), "'dev'"),
        (_member("fifo", tarfile.FIFOTYPE), "'fifo'"),
        (_member("../up"), "'../up'"),
        (_member("/abs/file"), "'/abs/file'"),
    ],
)
def test_unsafe_members_are_named(tmp_path: Path, member: tarfile.TarInfo, said: str) -> None:
    path = _archive(tmp_path, _member("ok.py"), member)
    with pytest.raises(SnapshotInvalid) as err:
        check_archive(path)
    assert said in err.value.message and SECRET.decode() not in err.value.message


def test_not_an_archive(tmp_path: Path) -> None:
    for data in (b"plain text", gzip.compress(b"not a tar " * 100)[:50]):
        path = tmp_path / "bad.tar.gz"
        path.write_bytes(data)
        with pytest.raises(SnapshotInvalid, match=r"not a valid tar\.gz"):
            check_archive(path)


def test_unpacked_size_and_member_count_are_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _archive(tmp_path, _member("a"), _member("b"), _member("c"))
    with pytest.raises(SnapshotTooLarge, match="unpack"):
        check_archive(path, max_content_bytes=2 * len(SECRET))
    monkeypatch.setattr(snapshot, "MAX_SNAPSHOT_MEMBERS", 2)
    with pytest.raises(SnapshotTooLarge, match="members"):
        check_archive(path)
