"""`tau diff`: the files of two code snapshots, compared by path and content."""

from __future__ import annotations

import copy
from typing import Any

from taugrid.domain.rundiff import compare_files, diff_runs, render


def member(path: str, size: int, sha: str, kind: str = "file") -> dict[str, Any]:
    return {"path": path, "type": kind, "size": size, "sha256": sha * 64}


def detail(run_id: str, digest: str) -> dict[str, Any]:
    return {
        "id": run_id,
        "spec": {"resolved": {"name": "x"}, "overrides": [], "snapshot_digest": digest * 64},
        "code": {"git": None},
        "env": {},
        "python_env": None,
    }


A = [member("keep.py", 5, "a"), member("edit.py", 10, "b"), member("gone.py", 3, "c")]
B = [member("keep.py", 5, "a"), member("edit.py", 10, "d"), member("new/x.bin", 5000, "e")]


def test_added_removed_and_changed_in_path_order() -> None:
    assert compare_files(A, B) == [
        {"path": "edit.py", "change": "changed", "a_size": 10, "b_size": 10},
        {"path": "gone.py", "change": "removed", "a_size": 3, "b_size": None},
        {"path": "new/x.bin", "change": "added", "a_size": None, "b_size": 5000},
    ]


def test_a_file_turned_symlink_is_a_change_even_with_the_same_hash() -> None:
    a = [member("link", 0, "f")]
    b = [member("link", 0, "f", kind="symlink")]
    assert [c["change"] for c in compare_files(a, b)] == ["changed"]


def test_diff_runs_carries_files_only_when_the_snapshots_differ() -> None:
    same = diff_runs(detail("r1", "1"), detail("r2", "1"), A, B)
    assert same["code"]["files"] == [] and same["identical"]
    unknown = diff_runs(detail("r1", "1"), detail("r2", "2"))
    assert unknown["code"]["files"] is None
    assert "files: not compared" in render(unknown)
    d = diff_runs(detail("r1", "1"), detail("r2", "2"), A, B)
    assert len(d["code"]["files"]) == 3 and not d["identical"]
    text = render(d)
    assert "  files: 1 changed, 1 added, 1 removed:" in text
    assert "    ~ edit.py (10 B -> 10 B)" in text
    assert "    + new/x.bin (4.9 KiB)" in text and "    - gone.py (3 B)" in text


def test_the_text_lists_fifty_files_and_quotes_names_a_terminal_would_act_on() -> None:
    many = [member(f"f{i:03}", 1, "a") for i in range(60)] + [member("\x1b[2Jevil", 1, "a")]
    text = render(diff_runs(detail("r1", "1"), detail("r2", "2"), [], copy.deepcopy(many)))
    assert "... and 11 more (tau diff -o json lists all)" in text
    assert "\x1b" not in text
    shown = render(diff_runs(detail("r1", "1"), detail("r2", "2"), [], many[-1:]))
    assert '+ "\\u001b[2Jevil"' in shown
