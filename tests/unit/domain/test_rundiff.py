"""The comparison of two run details (`tau diff`), its JSON shape and its text."""

from __future__ import annotations

import copy
import json
from typing import Any

from taugrid.domain.rundiff import compare, diff_runs, flatten, render

RESOLVED: dict[str, Any] = {
    "name": "exp",
    "workspace": "default",
    "experiment": None,
    "command": ["python", "train.py"],
    "env": {"LR": "0.1"},
    "resources": {"gpus": 1, "gpu_type": None, "cpus": None, "memory": None},
    "timeout": None,
}


def run(run_id: str = "exp-aaaaa", **changes: Any) -> dict[str, Any]:
    detail: dict[str, Any] = {
        "id": run_id,
        "spec": {
            "source": "tau.yaml",
            "file_text": "…",
            "overrides": [],
            "resolved": copy.deepcopy(RESOLVED),
            "hash": "h",
            "snapshot_digest": "1" * 64,
        },
        "env": {"PATH": "/usr/bin", "LANG": "C"},
        "code": {
            "snapshot_digest": "1" * 64,
            "git": {
                "commit": "a" * 40,
                "branch": "main",
                "dirty": False,
                "diff": None,
                "diff_truncated": False,
                "untracked": [],
            },
        },
        "python_env": {
            "version": "3.11.7",
            "implementation": "CPython",
            "executable": "/venv/bin/python3",
            "packages": {"numpy": "1.26.4", "torch": "2.3.0"},
        },
    }
    detail.update(changes)
    return detail


def test_identical_runs() -> None:
    d = diff_runs(run("a"), run("b"))
    assert d["identical"] is True
    assert d["spec"] == [] and d["code"]["git"] == [] and d["overrides"]["same"]
    assert render(d) == "no differences"


def test_spec_changes_as_dotted_paths() -> None:
    b = run("b")
    b["spec"]["resolved"]["env"] = {"LR": "0.2", "SEED": "1"}
    b["spec"]["resolved"]["resources"]["gpus"] = 2
    b["spec"]["resolved"]["timeout"] = "1h"
    b["spec"]["resolved"]["experiment"] = {"name": "sweep", "group": None, "tags": {}}
    b["spec"]["resolved"]["command"] = ["python", "train.py", "--fast"]
    del b["spec"]["resolved"]["workspace"]
    d = diff_runs(run("a"), b)
    assert d["identical"] is False
    assert d["spec"] == [
        {"key": "workspace", "change": "removed", "a": "default", "b": None},
        {"key": "command", "change": "changed", "a": ["python", "train.py"],
         "b": ["python", "train.py", "--fast"]},
        {"key": "env.LR", "change": "changed", "a": "0.1", "b": "0.2"},
        {"key": "resources.gpus", "change": "changed", "a": 1, "b": 2},
        {"key": "timeout", "change": "changed", "a": None, "b": "1h"},
        # experiment: null against a mapping shows the mapping's keys, not a null key
        {"key": "experiment.name", "change": "added", "a": None, "b": "sweep"},
        {"key": "env.SEED", "change": "added", "a": None, "b": "1"},
    ]  # fmt: skip
    text = render(d)
    assert '  ~ env.LR: "0.1" -> "0.2"' in text
    assert '  + env.SEED: "1"' in text and '  - workspace: "default"' in text
    assert '  ~ command: ["python","train.py"] -> ["python","train.py","--fast"]' in text


def test_values_of_different_types_differ() -> None:
    assert compare({"x": 1}, {"x": 1.0}) == [{"key": "x", "change": "changed", "a": 1, "b": 1.0}]
    assert compare({"x": "1"}, {"x": 1})[0]["change"] == "changed"
    assert compare({"x": True}, {"x": 1})[0]["change"] == "changed"
    assert flatten({"a": {}, "b": {"c": []}}) == {"b.c": []}
    assert compare({"x": None}, {}) == [] and compare({}, {"x": None}) == []


def test_code_section() -> None:
    b = run("b")
    b["spec"]["snapshot_digest"] = "2" * 64
    b["code"]["git"] |= {"commit": "b" * 40, "dirty": True, "untracked": ["new.py"]}
    b["code"]["git"]["diff"] = "--- a/x\n+++ b/x\n-old\n+new\n"
    d = diff_runs(run("a"), b)
    code = d["code"]
    assert code["snapshot"] == {"a": "1" * 64, "b": "2" * 64, "same": False}
    assert [c["key"] for c in code["git"]] == ["git.commit", "git.dirty", "git.untracked"]
    assert code["diff"] == {"a_lines": None, "b_lines": 4, "same": False, "unified": None}
    text = render(d)
    assert "  snapshot: different (111111111111 -> 222222222222)" in text
    assert "  uncommitted changes: only B has them (4 lines of diff)" in text


def test_both_dirty_diffs_are_diffed() -> None:
    a, b = run("a"), run("b")
    a["code"]["git"] |= {"dirty": True, "diff": "+lr = 0.1\n context\n"}
    b["code"]["git"] |= {"dirty": True, "diff": "+lr = 0.2\n context\n"}
    d = diff_runs(a, b)
    unified = d["code"]["diff"]["unified"]
    assert unified.splitlines()[:2] == ["--- a git diff", "+++ b git diff"]
    assert "-+lr = 0.1" in unified and "++lr = 0.2" in unified
    assert "    -+lr = 0.1" in render(d)


def test_missing_git_record_on_one_side() -> None:
    b = run("b", code={"snapshot_digest": "1" * 64, "git": None})
    d = diff_runs(run("a"), b)
    assert {c["change"] for c in d["code"]["git"]} == {"removed"}
    assert "git.commit" in [c["key"] for c in d["code"]["git"]]
    old_server = run("c")
    del old_server["code"], old_server["python_env"]
    assert diff_runs(old_server, copy.deepcopy(old_server))["identical"] is True


def test_environment_section() -> None:
    b = run("b")
    b["python_env"] = {
        "version": "3.12.1",
        "implementation": "CPython",
        "executable": "/venv/bin/python3",
        "packages": {"numpy": "2.0.0", "rich": "13.7.0"},
    }
    b["env"] = {"PATH": "/opt/bin:/usr/bin", "LANG": "C", "AWS_SECRET_ACCESS_KEY": "leak"}
    d = diff_runs(run("a"), b)
    env = d["environment"]
    assert env["python"] == [
        {"key": "python.version", "change": "changed", "a": "3.11.7", "b": "3.12.1"}
    ]
    assert env["packages"] == [
        {"key": "numpy", "change": "changed", "a": "1.26.4", "b": "2.0.0"},
        {"key": "rich", "change": "added", "a": None, "b": "13.7.0"},
        {"key": "torch", "change": "removed", "a": "2.3.0", "b": None},
    ]
    # Only allow-listed names are ever compared or shown.
    assert env["env"] == [
        {"key": "PATH", "change": "changed", "a": "/usr/bin", "b": "/opt/bin:/usr/bin"}
    ]
    text = render(d)
    assert "leak" not in text and "leak" not in json.dumps(d)
    assert "  packages: 1 changed, 1 added, 1 removed:" in text
    assert "    ~ numpy: 1.26.4 -> 2.0.0" in text
    assert '  ~ env.PATH: "/usr/bin" -> "/opt/bin:/usr/bin"' in text


def test_overrides_section() -> None:
    a, b = run("a"), run("b")
    a["spec"]["overrides"] = ["env.LR=0.1"]
    b["spec"]["overrides"] = ["env.LR=0.1", "command=python a b.py"]
    d = diff_runs(a, b)
    assert d["overrides"] == {
        "a": ["env.LR=0.1"],
        "b": ["env.LR=0.1", "command=python a b.py"],
        "only_a": [],
        "only_b": ["command=python a b.py"],
        "same": False,
    }
    assert "  B: env.LR=0.1 'command=python a b.py'" in render(d)


def test_long_values_are_cut() -> None:
    b = run("b")
    b["spec"]["resolved"]["env"]["LR"] = "x" * 200
    line = next(x for x in render(diff_runs(run("a"), b)).splitlines() if "env.LR" in x)
    assert line.endswith("…") and len(line) < 200
