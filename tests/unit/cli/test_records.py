"""What `tau run` records about code (git) and the workload's Python, on real repositories."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from taugrid.cli import records

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    return subprocess.run(
        ["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    r = tmp_path / "repo"
    r.mkdir()
    git(r, "init", "-q", "-b", "main")
    (r / "train.py").write_text("print('v1')\n")
    (r / ".gitignore").write_text("*.log\n")
    git(r, "add", ".")
    git(r, "commit", "-qm", "first")
    return r


def test_clean_repository(repo: Path) -> None:
    info = records.capture_git(repo)
    assert info == {
        "commit": git(repo, "rev-parse", "HEAD"),
        "branch": "main",
        "dirty": False,
        "diff": None,
        "diff_truncated": False,
        "untracked": [],
    }


def test_dirty_file_untracked_file_and_ignored_file(repo: Path) -> None:
    (repo / "train.py").write_text("print('v2')\n")
    (repo / "new.py").write_text("x = 1\n")
    (repo / "data").mkdir()
    (repo / "data" / "a.csv").write_text("1\n")
    (repo / "run.log").write_text("ignored\n")
    info = records.capture_git(repo)
    assert info is not None
    assert info["dirty"] is True
    assert info["untracked"] == ["data/", "new.py"]  # git's own list; ignored files absent
    assert "-print('v1')" in info["diff"] and "+print('v2')" in info["diff"]
    assert info["diff_truncated"] is False


def test_staged_change_and_untracked_only_are_dirty(repo: Path) -> None:
    (repo / "other.py").write_text("y = 2\n")
    info = records.capture_git(repo)
    assert info is not None and info["dirty"] is True and info["diff"] is None
    git(repo, "add", "other.py")
    info = records.capture_git(repo)
    assert info is not None and info["dirty"] and "+y = 2" in info["diff"]
    assert info["untracked"] == []


def test_diff_is_cut_at_the_cap_on_a_line_boundary(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(records, "MAX_DIFF_BYTES", 4096)
    (repo / "train.py").write_text("".join(f"print({i})\n" for i in range(5000)))
    info = records.capture_git(repo)
    assert info is not None and info["diff_truncated"] is True
    assert len(info["diff"].encode()) <= 4096 and info["diff"].endswith("\n")
    assert info["diff"].startswith("diff --git a/train.py b/train.py")


def test_untracked_list_is_capped(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(records, "MAX_UNTRACKED", 3)
    for i in range(10):
        (repo / f"u{i}.txt").write_text("x")
    info = records.capture_git(repo)
    assert info is not None and info["untracked"] == ["u0.txt", "u1.txt", "u2.txt"]


def test_only_the_workdir_counts_in_a_subdirectory(repo: Path) -> None:
    sub = repo / "proj"
    sub.mkdir()
    (sub / "a.py").write_text("a\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "sub")
    (repo / "train.py").write_text("changed outside the workdir\n")
    (repo / "outside.txt").write_text("x")
    info = records.capture_git(sub)
    assert info is not None and info["dirty"] is False and info["untracked"] == []
    (sub / "a.py").write_text("b\n")
    info = records.capture_git(sub)
    assert info is not None and info["dirty"] and "proj/a.py" in info["diff"]
    assert "train.py" not in info["diff"]


def test_rename_and_detached_head(repo: Path) -> None:
    git(repo, "mv", "train.py", "main.py")
    git(repo, "commit", "-qm", "rename")
    git(repo, "checkout", "-q", "--detach", "HEAD")
    git(repo, "mv", "main.py", "renamed.py")
    info = records.capture_git(repo)
    assert info is not None
    assert info["branch"] is None and info["dirty"] and info["untracked"] == []


def test_not_a_repository_no_commit_and_no_git(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    (tmp_path / "plain" / ".git").write_text("gitdir: /nonexistent\n")  # stop the upward search
    assert records.capture_git(plain) is None
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "-q")
    (empty / "a.py").write_text("x")
    assert records.capture_git(empty) is None  # nothing to name the code by
    assert records.capture_code(plain) == {"git": None}


def test_git_missing_gives_none(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(repo / "no-bin"))
    assert records.capture_git(repo) is None


def test_run_capped_times_out_and_kills(tmp_path: Path) -> None:
    t0 = time.monotonic()
    out = records._run_capped(
        [sys.executable, "-c", "import time; time.sleep(30)"], tmp_path, None, cap=10, timeout=0.3
    )
    assert out is None and time.monotonic() - t0 < 5


def test_run_capped_stops_reading_at_the_cap(tmp_path: Path) -> None:
    endless = [sys.executable, "-c", "import sys\nwhile True: sys.stdout.write('x' * 65536)"]
    out = records._run_capped(endless, tmp_path, None, cap=100_000, timeout=10)
    assert out is not None and out[1] is True and len(out[0]) == 100_000


# -- Python environment ---------------------------------------------------------------------


def test_python_env_in_process_when_path_finds_this_interpreter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bindir = str(Path(sys.executable).parent)
    if not records._is_this_environment(records.workload_python(bindir) or ""):
        pytest.skip("this interpreter's directory has no python3/python of its own")
    called = []
    monkeypatch.setattr(records, "_run_capped", lambda *a, **k: called.append(a))
    env = records.capture_python_env(bindir)
    assert called == []
    assert env is not None
    assert env["version"] == ".".join(map(str, sys.version_info[:3]))
    assert env["implementation"] == "CPython"
    assert "pytest" in env["packages"] and "click" in env["packages"]
    from importlib import metadata

    assert env["packages"]["pytest"] == metadata.version("pytest")


def test_python_env_of_another_interpreter_runs_the_probe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A wrapper script is a different binary: the probe runs in a subprocess.
    bindir = tmp_path / "bin"
    bindir.mkdir()
    wrapper = bindir / "python3"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    site = tmp_path / "site"
    (site / "Fancy_Pkg-1.2.3.dist-info").mkdir(parents=True)
    (site / "Fancy_Pkg-1.2.3.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: Fancy_Pkg\nVersion: 1.2.3\n\nbody\n"
    )
    (site / "old.egg-info").write_text("Metadata-Version: 1.0\nName: old\nVersion: 0.1\n")
    monkeypatch.setenv("PYTHONPATH", str(site))  # the workload sees it too
    env = records.capture_python_env(str(bindir))
    assert env is not None
    assert env["packages"]["fancy-pkg"] == "1.2.3"  # PEP 503 name
    assert env["packages"]["old"] == "0.1"
    assert env["version"] == ".".join(map(str, sys.version_info[:3]))


def test_a_venv_sharing_our_binary_is_not_our_environment(tmp_path: Path) -> None:
    # pipx-style: another venv whose python links to the same base binary as ours.
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (venv / "bin" / "python3").symlink_to(os.path.realpath(sys.executable))
    assert not records._is_this_environment(str(venv / "bin" / "python3"))


def test_python_env_none_when_missing_or_broken(tmp_path: Path) -> None:
    assert records.capture_python_env(str(tmp_path / "nothing")) is None
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "python3").write_text("#!/bin/sh\necho not json\n")
    (bindir / "python3").chmod(0o755)
    assert records.capture_python_env(str(bindir)) is None
    (bindir / "python3").write_text("#!/bin/sh\nsleep 30\n")
    assert records.capture_python_env(str(bindir), timeout=0.3) is None


def test_no_environment_variable_is_recorded(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_SECRET_TOKEN", "hunter2-do-not-record")
    captured = records.Capture(repo, str(Path(sys.executable).parent))
    code, python_env = captured.result()
    text = json.dumps([code, python_env])
    assert "hunter2-do-not-record" not in text and "MY_SECRET_TOKEN" not in text
    assert code is not None and code["git"]["commit"]
    assert python_env is not None and set(python_env) == {
        "version",
        "implementation",
        "executable",
        "packages",
    }
