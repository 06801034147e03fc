"""`tau diff`: prints the comparison as text or JSON and exits 0 either way. The comparison
itself: tests/unit/domain/test_rundiff.py."""

from __future__ import annotations

import json
from typing import Any

import pytest
from clifakes import FakeClient, invoke


def detail(run_id: str, lr: str) -> dict[str, Any]:
    return {
        "id": run_id,
        "spec": {
            "resolved": {"name": "exp", "env": {"LR": lr}},
            "overrides": [],
            "snapshot_digest": "1" * 64,
        },
        "code": {"snapshot_digest": "1" * 64, "git": None},
        "env": {},
        "python_env": None,
    }


def test_command_prints_text_or_json_and_exits_0(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeClient({"a": detail("exp-aaaaa", "0.1"), "b": detail("exp-bbbbb", "0.2")})
    result = invoke(monkeypatch, "diff", fake, "diff", "a", "b")
    assert result.exit_code == 0
    assert result.stdout.splitlines()[:2] == ["A: exp-aaaaa", "B: exp-bbbbb"]
    assert '  ~ env.LR: "0.1" -> "0.2"' in result.stdout
    result = invoke(monkeypatch, "diff", fake, "diff", "a", "b", "-o", "json")
    data = json.loads(result.stdout)
    assert set(data) == {"a", "b", "identical", "spec", "code", "environment", "overrides"}
    assert invoke(monkeypatch, "diff", fake, "diff", "a", "a").stdout == "no differences\n"
