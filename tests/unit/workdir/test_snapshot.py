"""Code snapshots: determinism, ignore rules, size limit, safe unpack, git metadata."""

from __future__ import annotations

import io
import json
import os
import shutil
import stat
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from taugrid.errors import SnapshotTooLarge, TauError, UsageError
from taugrid.workdir.snapshot import (
    create_snapshot,
    unpack_snapshot,
    verify_archive,
)


def make_tree(root: Path, files: dict[str, str | bytes]) -> Path:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return root


def names(archive: Path) -> list[str]:
    with tarfile.open(archive, "r:gz") as tar:
        return tar.getnames()


@pytest.fixture(autouse=True)
def no_outer_git(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Keep git from finding a repository above tmp_path, and from reading user config.
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")


def test_same_content_same_digest(tmp_path: Path) -> None:
    work = make_tree(tmp_path / "w", {"train.py": "print(1)\n", "pkg/m.py": "x = 1\n"})
    a = create_snapshot(work, [], tmp_path / "s1")
    b = create_snapshot(work, [], tmp_path / "s2")
    assert a.digest == b.digest
    assert a.path.read_bytes() == b.path.read_bytes()
    assert a.path == tmp_path / "s1" / f"{a.digest}.tar.gz"
    assert a.size_bytes == a.path.stat().st_size
    assert (a.file_count, a.content_bytes, a.git) == (2, 15, None)

    os.utime(work / "train.py", (1, 1))  # times are not content
    assert create_snapshot(work, [], tmp_path / "s1").digest == a.digest

    (work / "train.py").write_text("print(2)\n")
    changed = create_snapshot(work, [], tmp_path / "s1")
    assert changed.digest != a.digest

    (work / "train.py").chmod(0o755)  # the executable bit is content
    assert create_snapshot(work, [], tmp_path / "s1").digest != changed.digest
    assert sorted(p.name for p in (tmp_path / "s1").iterdir()) == sorted(
        f"{d}.tar.gz"
        for d in {a.digest, changed.digest, create_snapshot(work, [], tmp_path / "s1").digest}
    )  # no temp files left behind


def test_archive_entries_are_normalised(tmp_path: Path) -> None:
    work = make_tree(tmp_path / "w", {"b.sh": "#!/bin/sh\n", "a/z.txt": "z", "a/y.txt": "y"})
    (work / "b.sh").chmod(0o775)
    (work / "link").symlink_to("a/z.txt")
    info = create_snapshot(work, [], tmp_path / "store")
    with tarfile.open(info.path, "r:gz") as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == ["a", "a/y.txt", "a/z.txt", "b.sh", "link"]
    for m in members:
        assert (m.mtime, m.uid, m.gid, m.uname, m.gname) == (0, 0, 0, "", "")
    by_name = {m.name: m for m in members}
    assert by_name["b.sh"].mode == 0o755
    assert by_name["a/y.txt"].mode == 0o644
    assert by_name["link"].issym() and by_name["link"].linkname == "a/z.txt"
    assert info.file_count == 4


def test_unpack_round_trip(tmp_path: Path) -> None:
    work = make_tree(tmp_path / "w", {"run.sh": "echo hi\n", "d/data.txt": "data"})
    (work / "run.sh").chmod(0o755)
    (work / "d" / "alias").symlink_to("data.txt")
    (work / "empty").mkdir()
    info = create_snapshot(work, [], tmp_path / "store")
    dest = tmp_path / "runs" / "r1" / "workdir"
    unpack_snapshot(info.path, dest)
    assert (dest / "d" / "data.txt").read_text() == "data"
    assert os.access(dest / "run.sh", os.X_OK)
    assert not os.access(dest / "d" / "data.txt", os.X_OK)
    assert os.readlink(dest / "d" / "alias") == "data.txt"
    assert (dest / "empty").is_dir()
    # Unpacked files get the current time: tools zipping the tree reject 1970 times.
    assert (dest / "d" / "data.txt").stat().st_mtime > time.time() - 60
    assert [p.name for p in dest.parent.iterdir()] == ["workdir"]  # no temp dir left
    with pytest.raises(TauError, match="already exists"):
        unpack_snapshot(info.path, dest)


def test_ignore_rules(tmp_path: Path) -> None:
    work = make_tree(
        tmp_path / "w",
        {
            ".gitignore": "*.log\n!keep.log\nbuild/\n/rootonly.txt\ndata/*\n!data/small.csv\n",
            ".tauignore": "# tau only\nscratch/\n!forced.log\n",
            "a.log": "",
            "keep.log": "",
            "forced.log": "",
            "build/out.o": "",
            "src/build/gen.py": "",
            "src/build.py": "",
            "rootonly.txt": "",
            "src/rootonly.txt": "",
            "data/big.csv": "",
            "data/small.csv": "",
            "scratch/x": "",
            "model.ckpt": "",
            "sub/.gitignore": "local.txt\n/anchored/\n!a.log\n",
            "sub/local.txt": "",
            "sub/a.log": "",
            "sub/anchored/x": "",
            "sub/deep/anchored/x": "",
            "other/local.txt": "",
            "secret/key": "",
            ".git/config": "",
            "pkg/__pycache__/m.cpython-311.pyc": "",
            ".venv/bin/tool": "",
        },
    )
    info = create_snapshot(work, ["*.ckpt", "secret/"], tmp_path / "store")
    files = {n for n in names(info.path) if not (work / n).is_dir()}
    assert files == {
        ".gitignore",
        ".tauignore",
        "keep.log",
        "forced.log",  # .tauignore wins over .gitignore
        "src/build.py",
        "src/rootonly.txt",
        "data/small.csv",
        "sub/.gitignore",
        "sub/a.log",  # a deeper .gitignore wins over its parent
        "sub/deep/anchored/x",
        "other/local.txt",
        ".venv/bin/tool",  # never skipped silently: users exclude it
    }


def test_exclude_wins_over_gitignore_negation(tmp_path: Path) -> None:
    work = make_tree(tmp_path / "w", {".gitignore": "!*.bin\n", "w.bin": "", "a.py": ""})
    info = create_snapshot(work, ["*.bin"], tmp_path / "store")
    assert "w.bin" not in names(info.path)


def test_too_large_names_the_biggest_paths(tmp_path: Path) -> None:
    work = make_tree(
        tmp_path / "w",
        {"data/big.bin": b"x" * 3000, "data/small.bin": b"x" * 10, "train.py": "x" * 100},
    )
    store = tmp_path / "store"
    with pytest.raises(SnapshotTooLarge) as err:
        create_snapshot(work, [], store, max_bytes=1000)
    message = err.value.message
    assert "data/big.bin" in message and "data/" in message and "train.py" in message
    assert "1000" in message and "3110" in message
    assert "exclude" in message and ".tauignore" in message
    assert message.index("data/") < message.index("train.py")  # biggest first
    assert not store.exists() or not any(store.iterdir())  # nothing written
    # Excluding the big directory is the fix the message suggests.
    assert create_snapshot(work, ["data/"], store, max_bytes=1000).content_bytes == 100


def test_symlink_leaving_the_workdir_is_refused_with_a_fix(tmp_path: Path) -> None:
    work = make_tree(tmp_path / "w", {"a.py": ""})
    (work / "datasets").symlink_to("/usr")
    with pytest.raises(UsageError, match="datasets"):
        create_snapshot(work, [], tmp_path / "store")
    assert "datasets" not in names(create_snapshot(work, ["datasets"], tmp_path / "store").path)


def test_missing_workdir(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not a directory"):
        create_snapshot(tmp_path / "nope", [], tmp_path / "store")


def test_verify_archive(tmp_path: Path) -> None:
    info = create_snapshot(make_tree(tmp_path / "w", {"a": "1"}), [], tmp_path / "store")
    assert verify_archive(info.path, info.digest)
    assert not verify_archive(info.path, "0" * 64)
    assert not verify_archive(tmp_path / "missing.tar.gz", info.digest)


def _malicious(tmp_path: Path, members: list[tuple[tarfile.TarInfo, bytes]]) -> Path:
    path = tmp_path / "evil.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data else None)
    return path


def _file(name: str) -> tarfile.TarInfo:
    return tarfile.TarInfo(name)


def _link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info


@pytest.mark.parametrize(
    "members",
    [
        [(_file("../evil.txt"), b"pwned")],
        [(_file("ok/../../evil.txt"), b"pwned")],
        [(_file("/tmp/evil-abs.txt"), b"pwned")],
        [(_link("esc", "../"), b""), (_file("esc/evil.txt"), b"pwned")],
        [(_link("abs", "/etc/passwd"), b"")],
        [(_link("hard", "/etc/passwd", tarfile.LNKTYPE), b"")],
    ],
    ids=["dotdot", "nested-dotdot", "absolute", "escaping-symlink", "absolute-link", "hardlink"],
)
def test_unpack_rejects_unsafe_members(
    tmp_path: Path, members: list[tuple[tarfile.TarInfo, bytes]]
) -> None:
    archive = _malicious(tmp_path, members)
    dest = tmp_path / "sandbox" / "dest"
    with pytest.raises(TauError):
        unpack_snapshot(archive, dest)
    assert not dest.exists()
    assert not (tmp_path / "sandbox" / "evil.txt").exists()
    assert not (tmp_path / "evil.txt").exists()
    assert list((tmp_path / "sandbox").iterdir()) == []  # temp dir cleaned up


def test_unpack_rejects_corrupt_archive(tmp_path: Path) -> None:
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(b"\x1f\x8b not really gzip")
    with pytest.raises(TauError, match="corrupt"):
        unpack_snapshot(bad, tmp_path / "dest")
    assert not (tmp_path / "dest").exists()


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_git_metadata_inside_a_repo(tmp_path: Path) -> None:
    repo = make_tree(
        tmp_path / "repo",
        {"proj/train.py": "print(1)\n", ".gitignore": "*.tmp\n/proj/local/\n", "README": "r"},
    )
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "init")
    commit = _git(repo, "rev-parse", "HEAD")
    (repo / "proj" / "train.py").write_text("print(2)\n")
    (repo / "proj" / "new.py").write_text("")
    # Ignored by the repository root's .gitignore, above the workdir:
    (repo / "proj" / "x.tmp").write_text("")
    (repo / "proj" / "local").mkdir()
    (repo / "proj" / "local" / "cache").write_text("")

    info = create_snapshot(repo / "proj", [], tmp_path / "store")
    assert info.git == {
        "commit": commit,
        "branch": "main",
        "dirty": True,
        "untracked": ["proj/new.py"],
        "path": "proj",
    }
    with tarfile.open(info.path, "r:gz") as tar:
        assert sorted(tar.getnames()) == [
            ".tau-snapshot",
            ".tau-snapshot/git.diff",
            ".tau-snapshot/git.json",
            "new.py",
            "train.py",
        ]
        git_json = tar.extractfile(".tau-snapshot/git.json")
        git_diff = tar.extractfile(".tau-snapshot/git.diff")
        assert git_json is not None and git_diff is not None
        with git_json, git_diff:
            assert json.load(git_json) == info.git
            diff = git_diff.read().decode()
    assert "-print(1)" in diff and "+print(2)" in diff

    _git(repo, "checkout", "-q", "--", ".")
    clean = create_snapshot(repo / "proj", [], tmp_path / "store")
    assert clean.git is not None and clean.git["dirty"] is False


def test_no_git_outside_a_repo(tmp_path: Path) -> None:
    info = create_snapshot(make_tree(tmp_path / "w", {"a": ""}), [], tmp_path / "store")
    assert info.git is None
    assert names(info.path) == ["a"]


def test_unreadable_file_mode_is_kept_as_executable_only(tmp_path: Path) -> None:
    work = make_tree(tmp_path / "w", {"tool": "x"})
    (work / "tool").chmod(0o700)
    with tarfile.open(create_snapshot(work, [], tmp_path / "s").path, "r:gz") as tar:
        assert stat.S_IMODE(tar.getmember("tool").mode) == 0o755
