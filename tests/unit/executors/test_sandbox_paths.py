"""The executor's side of the sandbox on real files: which installations a workload's
paths lead to, and handing the run's files to its uid without following links."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from taugrid.executors.local import isolation


def fake_python(prefix: Path) -> Path:
    (prefix / "bin").mkdir(parents=True)
    real = prefix / "bin" / "python3.11"
    real.write_text("#!/bin/sh\n")
    real.chmod(0o755)
    return real


def test_a_venv_leads_to_the_real_interpreter_behind_its_symlinks(tmp_path: Path) -> None:
    base = tmp_path / "pyenv" / "versions" / "3.11.7"
    real = fake_python(base)
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python3").symlink_to(real)
    (venv / "bin" / "python").symlink_to("python3")
    (venv / "pyvenv.cfg").write_text(f"home = {base / 'bin'}\nversion = 3.11.7\n")
    got = isolation.interpreter_paths([str(venv / "bin"), str(venv)])
    assert got == [str(base)]
    assert isolation.interpreter_paths([str(venv / "bin" / "python")]) == [str(base)]


def test_a_copied_venv_python_is_found_through_pyvenv_cfg(tmp_path: Path) -> None:
    base = tmp_path / "opt" / "py"
    fake_python(base)
    venv = tmp_path / "venv"
    copy = fake_python(venv)  # --copies: a real file, not a link
    copy = copy.rename(copy.with_name("python3"))
    (venv / "pyvenv.cfg").write_text(f"home = {base / 'bin'}\n")
    assert isolation.interpreter_paths([str(copy.parent)]) == [str(venv), str(base)]


def test_other_absolute_commands_lead_to_their_real_file(tmp_path: Path) -> None:
    tool = tmp_path / "tools" / "train"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\n")
    link = tmp_path / "bin" / "train"
    link.parent.mkdir()
    link.symlink_to(tool)
    assert isolation.interpreter_paths([str(link.parent)]) == []  # not a python
    assert isolation.interpreter_paths([str(link)]) == [str(tool)]
    assert isolation.interpreter_paths([str(tmp_path / "missing")]) == []


def test_make_private_strips_modes_and_never_follows_links(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.write_text("not the run's\n")
    outside.chmod(0o644)
    run = tmp_path / "run"
    (run / "sub").mkdir(parents=True)
    (run / "sub" / "f.py").write_text("x\n")
    (run / "sub" / "f.py").chmod(0o755)
    (run / "link").symlink_to(outside)
    (run / "dirlink").symlink_to(tmp_path)
    run.chmod(0o755)
    uid = 2_000_777 if os.geteuid() == 0 else None
    isolation.make_private(run, uid)
    assert stat.S_IMODE(run.stat().st_mode) == 0o700
    assert stat.S_IMODE((run / "sub" / "f.py").stat().st_mode) == 0o700
    assert stat.S_IMODE(outside.stat().st_mode) == 0o644  # the link's target is untouched
    assert outside.stat().st_uid == os.geteuid()
    if uid is not None:
        assert (run / "sub" / "f.py").stat().st_uid == uid
        assert os.lstat(run / "link").st_uid == uid  # the link itself
        assert tmp_path.stat().st_uid == 0


def test_hand_over_creates_the_bound_files(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("chown needs root")
    work = tmp_path / "workdir"
    work.mkdir()
    metrics = tmp_path / "metrics.jsonl"
    isolation.hand_over({"uid": 2_000_778, "writable": [str(work), str(metrics)]}, [metrics])
    assert metrics.stat().st_uid == 2_000_778 and work.stat().st_uid == 2_000_778
    assert stat.S_IMODE(metrics.stat().st_mode) == 0o600
    (tmp_path / "evil").symlink_to("/etc/hostname")
    with pytest.raises(OSError):  # a planted link is not followed
        isolation.hand_over({"uid": 2_000_778, "writable": []}, [tmp_path / "evil"])


def test_describe_exposes_what_the_workload_names_and_only_what_exists(tmp_path: Path) -> None:
    hidden = tmp_path / "server-home"
    base = hidden / ".pyenv" / "versions" / "3.11.7"
    real = fake_python(base)
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python3").symlink_to(real)
    home = tmp_path / "tau"
    work = home / "runs" / "r1" / "workdir"
    work.mkdir(parents=True)
    policy = isolation.SandboxPolicy(
        bwrap="/usr/bin/bwrap",
        private=(str(home),),
        hidden=(str(hidden), str(tmp_path / "missing-home")),
        conceal=(str(hidden / ".config" / "tau"), str(tmp_path / "oidc-secret")),
        uids=(2_000_000, 2_000_009),
        setpriv="/usr/bin/setpriv",
        scratch=("/tmp", str(tmp_path / "no-such-scratch")),
    )
    (tmp_path / "oidc-secret").write_text("s\n")
    desc = policy.describe(
        "r1",
        writable=[work],
        chdir=work,
        env={"PATH": f"{venv / 'bin'}:/usr/bin", "VIRTUAL_ENV": str(venv)},
        command=["python3", "train.py"],
    )
    # The interpreter behind the venv's links, and the venv itself: tmp_path is under the
    # scratch /tmp, which the sandbox replaces. /usr/bin shows through the read-only root.
    # (venv/bin is inside venv: one bind shows both).
    assert desc["expose"] == [str(base), str(venv)]
    assert desc["hidden"] == [str(hidden)] and desc["scratch"] == ["/tmp"]
    assert desc["conceal"] == [[str(tmp_path / "oidc-secret"), False]]
    assert 2_000_000 <= desc["uid"] <= 2_000_009 and desc["setpriv"] == "/usr/bin/setpriv"
    assert desc["writable"] == [str(work)] and desc["chdir"] == str(work)
    assert desc["private"] == [str(home)] and desc["userns"] is False
