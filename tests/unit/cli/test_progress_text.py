"""Archive and upload progress: its words, and when the drawing class draws (a clock of
our own, a StringIO for the terminal)."""

from __future__ import annotations

import io

from taugrid.cli.progress import (
    DELAY_S,
    SubmitProgress,
    archiving_text,
    human_bytes,
    summary_text,
    uploading_text,
)

MIB = 1 << 20


def test_sizes_and_texts() -> None:
    assert [human_bytes(n) for n in (0, 512, 3482, 91.2 * MIB, 1.5 * (1 << 30))] == [
        "0 B",
        "512 B",
        "3.4 KiB",
        "91.2 MiB",
        "1.5 GiB",
    ]
    assert archiving_text(312, 1204, int(40.1 * MIB), int(91.2 * MIB)) == (
        "archiving: 312/1,204 files, 40.1/91.2 MiB"
    )
    # A file that grew while it was read never shows more than the total.
    assert archiving_text(3, 2, 20, 10) == "archiving: 2/2 files, 10/10 B"
    assert uploading_text(int(40 * MIB), int(64 * MIB), 2.0) == (
        "uploading: 40.0/64.0 MiB (62%), 20.0 MiB/s"
    )
    assert uploading_text(0, 100, 0.0) == "uploading: 0/100 B (0%)"
    assert uploading_text(100, 100, 1.0) == "uploading: 100/100 B sent, the server is checking it"
    assert summary_text(int(91.2 * MIB), 1204, 63 * MIB, 2.04, 3.1) == (
        "snapshot 91.2 MiB, 1,204 files, archived to 63.0 MiB in 2.0 s, uploaded in 3.1 s"
    )
    assert summary_text(10 * MIB, 1, 2 * MIB, 0.5, None).endswith(", already on the server")


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_quick_work_draws_nothing_and_prints_no_summary() -> None:
    out, clock = io.StringIO(), _Clock()
    progress = SubmitProgress(True, out, clock)
    progress.archiving(0, 0, 2, 100)
    clock.t = DELAY_S / 2
    progress.archiving(2, 100, 2, 100)
    progress.archived()
    progress.finish(100, 2, 50)
    assert out.getvalue() == ""


def test_long_work_redraws_one_line_then_prints_the_summary() -> None:
    out, clock = io.StringIO(), _Clock()
    progress = SubmitProgress(True, out, clock)
    clock.t = 1.0
    progress.archiving(1, 50 * MIB, 4, 90 * MIB)
    clock.t = 1.01
    progress.archiving(2, 60 * MIB, 4, 90 * MIB)  # within the redraw interval: skipped
    clock.t = 1.02
    progress.archiving(4, 90 * MIB, 4, 90 * MIB)  # the last one is always drawn
    progress.archived()
    sent = progress.uploader(10 * MIB)
    clock.t = 3.02
    sent(10 * MIB)
    progress.uploaded()
    progress.finish(90 * MIB, 4, 10 * MIB)
    text = out.getvalue()
    assert "archiving: 1/4 files, 50.0/90.0 MiB" in text
    assert "2/4 files" not in text
    assert "archiving: 4/4 files, 90.0/90.0 MiB" in text
    assert "uploading: 10.0/10.0 MiB sent" in text
    assert "\n" not in text.rstrip("\n")  # one line rewritten in place, then the summary
    assert text.endswith(
        "\rsnapshot 90.0 MiB, 4 files, archived to 10.0 MiB in 1.0 s, uploaded in 2.0 s\n"
    )


def test_disabled_progress_writes_nothing() -> None:
    out, clock = io.StringIO(), _Clock()
    progress = SubmitProgress(False, out, clock)
    clock.t = 5.0
    progress.archiving(1, 1, 1, 1)
    progress.uploader(10)(10)
    progress.finish(1, 1, 1)
    progress.abandon()
    assert out.getvalue() == ""
