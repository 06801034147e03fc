"""`tau rerun`: submits the rerun payload once with a fresh idempotency key; a bad override
submits nothing (exit 2). The payload itself: tests/unit/spec/test_spec_rerun.py."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from clifakes import FakeClient, invoke

from taugrid.errors import SpecError
from taugrid.spec import load_spec

SPEC = "name: exp\ncommand: python train.py --lr ${LR}\nenv:\n  LR: '0.1'\n"


def record(tmp_path: Path) -> dict[str, Any]:
    """A run detail as the server returns it for a run submitted from SPEC."""
    (tmp_path / "tau.yaml").write_text(SPEC)
    loaded = load_spec(tmp_path / "tau.yaml")
    return {
        "id": "exp-abcde",
        "name": loaded.resolved["name"],
        "state": "SUCCEEDED",
        "spec": {
            "source": loaded.source,
            "file_text": loaded.file_text,
            "overrides": loaded.overrides,
            "resolved": loaded.resolved,
            "hash": loaded.spec_hash,
            "snapshot_digest": "ab" * 32,
        },
        "env": {},
        "code": None,
        "python_env": None,
    }


def test_command_submits_once_with_a_fresh_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeClient({"exp": record(tmp_path)})
    result = invoke(
        monkeypatch, "rerun", fake, "rerun", "exp", "--set", "env.LR=0.9", "--gpus", "0"
    )
    assert result.exit_code == 0, result.output
    assert "run new-run01 submitted as a rerun of exp-abcde (QUEUED)" in result.stdout
    ((payload, key),) = fake.submitted
    assert payload["overrides"] == ["env.LR=0.9", "resources.gpus=0"]
    assert uuid.UUID(key)
    invoke(monkeypatch, "rerun", fake, "rerun", "exp")
    assert fake.submitted[0][1] != fake.submitted[1][1]


def test_command_with_a_bad_override_submits_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeClient({"exp": record(tmp_path)})
    result = invoke(monkeypatch, "rerun", fake, "rerun", "exp", "--set", "resources.gpus=x")
    assert isinstance(result.exception, SpecError) and result.exception.exit_code == 2
    assert fake.submitted == []


def test_command_json_output_is_the_submit_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeClient({"exp": record(tmp_path)})
    result = invoke(monkeypatch, "rerun", fake, "rerun", "exp", "-o", "json")
    assert json.loads(result.stdout) == {
        "run": {"id": "new-run01", "state": "QUEUED", "name": "exp"},
        "created": True,
    }
