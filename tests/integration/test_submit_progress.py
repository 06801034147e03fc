"""A 90 MiB workdir: `tau run` on a terminal shows what it archives and uploads, then one
summary line; piped, it prints exactly what it printed before."""

from __future__ import annotations

import os
import re
from pathlib import Path

from ptyproc import TtyProc
from tauproc import Tau

MIB = 1 << 20


def _workdir(path: Path, marker: str, mib: int = 90) -> Path:
    """``mib`` MiB in as many files: half of it random (it stays big in the archive, so
    there is an upload to watch), half repetitive."""
    path.mkdir()
    block = os.urandom(16 * 1024)
    for i in range(mib):
        data = os.urandom(MIB) if i % 2 else block * 64
        (path / f"part-{i:02d}.bin").write_bytes(data)
    (path / "marker.txt").write_text(marker)
    return path


def test_progress_on_a_terminal_and_nothing_extra_when_piped(tau: Tau, tmp_path: Path) -> None:
    tau.start_server()
    on_tty = _workdir(tmp_path / "tty", "a")
    proc = TtyProc(tau, "run", "--name", "big", "--", "true", cwd=on_tty)
    try:
        assert proc.wait(timeout=90) == 0, proc.output
    finally:
        proc.kill()
    shown = proc.output
    assert re.search(r"archiving: [\d,]+/91 files, [\d.]+/90\.0 MiB", shown), shown
    assert "archiving: 91/91 files, 90.0/90.0 MiB" in shown
    assert re.search(r"uploading: [\d.]+/4\d\.\d MiB", shown), shown
    summary = re.search(
        r"snapshot 90\.0 MiB, 91 files, archived to 4\d\.\d MiB in [\d.]+ s, uploaded in [\d.]+ s",
        shown,
    )
    assert summary, shown
    assert re.search(r"run big-\w+ submitted \(QUEUED\)", shown)

    piped = _workdir(tmp_path / "piped", "b")  # other content: archived and uploaded again
    done = tau("run", "--name", "big2", "--", "true", cwd=piped, timeout=90)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # no progress, no summary, no carriage returns
    assert re.fullmatch(r"run big2-\w+ submitted \(QUEUED\)\n  tau status .*\n", done.stdout)

    # -o json on a terminal: the answer alone, no progress around it.
    as_json = _workdir(tmp_path / "json", "c", mib=30)
    proc = TtyProc(tau, "run", "-o", "json", "--name", "big3", "--", "true", cwd=as_json)
    try:
        assert proc.wait(timeout=90) == 0, proc.output
    finally:
        proc.kill()
    assert proc.output.lstrip().startswith("{") and "archiving" not in proc.output
