"""``tau admin policy validate|render``: through the real entry point, as users run it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from policy_samples import TWO_COHORTS

from taugrid.cli.main import main


def tau(monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    monkeypatch.setattr(sys, "argv", ["tau", *args])
    with pytest.raises(SystemExit) as exited:
        main()
    return int(exited.value.code or 0)


def test_validate_prints_valid_and_a_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(TWO_COHORTS)
    assert tau(monkeypatch, "admin", "policy", "validate", str(path)) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{path}: valid (policy hash ")
    assert out[1:] == [
        "  flavors (2): h100 (h100); a100 (a100)",
        "  cluster queues (4): team-a [research]; team-b [research]; serving [production]; "
        "batch [production]",
        "  cohorts (2): research; production",
        "  priorities (3): preemptible=-10; standard=500 (default); critical=2000000000",
        "  workspaces (2): team-a: urgent->team-a, main->team-a; "
        "team-b: main->team-b, serving->serving, batch->batch",
    ]


def test_validate_reports_every_problem_and_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(
        TWO_COHORTS.replace("cohort: production", "cohort: prod").replace(
            "- flavor: a100", "- flavor: b100"
        )
    )
    assert tau(monkeypatch, "admin", "policy", "validate", str(path)) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 4
    assert all(line.startswith(f"{path}:") for line in lines)
    assert f"{path}:24:17: cluster_queues[0].resources[1].flavor: unknown flavor 'b100'" in lines[0]
    assert "unknown cohort 'prod'" in lines[2]


def test_render_prints_the_objects(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(TWO_COHORTS)
    assert (
        tau(monkeypatch, "admin", "policy", "render", str(path), "--namespace-prefix", "tau-") == 0
    )
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert len(docs) == 18
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "Namespace"] == [
        "tau-team-a",
        "tau-team-b",
    ]


def test_render_refuses_a_bad_prefix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(TWO_COHORTS)
    assert tau(monkeypatch, "admin", "policy", "render", str(path), "--namespace-prefix", "T") == 2
    assert "tau: namespace 'Tteam-a'" in capsys.readouterr().err


def test_help_lists_the_policy_commands(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert tau(monkeypatch, "admin", "policy", "--help") == 0
    out = capsys.readouterr().out
    assert "validate" in out and "render" in out


def test_admin_imports_no_pydantic_until_a_command_runs(tmp_path: Path) -> None:
    dump = tmp_path / "modules.json"
    code = (
        "import json, sys\n"
        "import taugrid.cli.commands.admin\n"
        f"open({str(dump)!r}, 'w').write(json.dumps(sorted(sys.modules)))\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30)
    modules = set(json.loads(dump.read_text()))
    assert not {m for m in modules if m.startswith(("pydantic", "taugrid.policy", "ruamel"))}
