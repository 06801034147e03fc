"""create_snapshot tells a progress callback how far the archive has come, and the
archive is byte for byte the one it writes without one."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

from taugrid.workdir.snapshot import create_snapshot


def test_progress_counts_files_and_bytes_up_to_the_totals(tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / "pkg").mkdir(parents=True)
    (work / "big.bin").write_bytes(os.urandom(200_000))  # several reads of one file
    (work / "pkg" / "a.py").write_text("print('a')\n")
    (work / "link").symlink_to("pkg/a.py")
    seen: list[tuple[int, int, int, int]] = []
    info = create_snapshot(
        work, [], tmp_path / "store", progress=lambda *p: seen.append((p[0], p[1], p[2], p[3]))
    )
    total = 200_000 + len("print('a')\n")
    assert seen[0] == (0, 0, 3, total)  # the totals come first, before any content
    assert seen[-1] == (3, total, 3, total)
    assert all(a[0] <= b[0] and a[1] <= b[1] for a, b in itertools.pairwise(seen))  # onward
    assert len({s[1] for s in seen}) > 3  # a big file reports as it is read, not once

    plain = create_snapshot(work, [], tmp_path / "store2")
    assert plain.digest == info.digest  # progress changes nothing in the archive
