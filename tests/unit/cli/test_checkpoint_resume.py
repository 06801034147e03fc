"""`tau get --checkpoint` (choice, sha256 check, manifest) and `tau resume`, on fakes."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from clifakes import FakeClient, invoke

from taugrid.cli.commands.get import choose_checkpoint
from taugrid.cli.commands.resume import next_attempt, resume_line
from taugrid.errors import Conflict, NotFound, TauError

FILES = {"model.pt": b"weights" * 1000, "sub/opt.pt": b"optimizer"}


def entry(step: int, verified: bool = True, files: dict[str, bytes] = FILES) -> dict[str, Any]:
    return {
        "step": step,
        "name": f"step-{step:010d}",
        "created_at": 1795990000.0 + step,
        "attempt": 0,
        "size": sum(len(b) for b in files.values()),
        "file_count": len(files),
        "verified": verified,
        "problem": None if verified else "model.pt: sha256 differs",
        "files": [
            {"path": p, "size": len(b), "sha256": hashlib.sha256(b).hexdigest()}
            for p, b in files.items()
        ],
    }


def fake_with(*checkpoints: dict[str, Any]) -> FakeClient:
    fake = FakeClient()
    fake.checkpoint_listing = {"run_id": "train-x7k2p", "checkpoints": list(checkpoints)}
    for ck in checkpoints:
        for path, data in FILES.items():
            fake.files[(ck["step"], path)] = data
    return fake


def test_choose_newest_verified_or_the_step_asked() -> None:
    cks = [entry(300, verified=False), entry(200), entry(100)]
    assert choose_checkpoint("r", cks, None, False)["step"] == 200
    assert choose_checkpoint("r", cks, 100, False)["step"] == 100
    assert choose_checkpoint("r", cks, 300, True)["step"] == 300
    with pytest.raises(Conflict, match=r"did not verify: model\.pt: sha256 differs; --force"):
        choose_checkpoint("r", cks, 300, False)
    with pytest.raises(NotFound, match=r"no checkpoint at step 7 \(it has: 300, 200, 100\)"):
        choose_checkpoint("r", cks, 7, False)
    with pytest.raises(NotFound, match="has no checkpoints"):
        choose_checkpoint("r", [], None, False)
    with pytest.raises(NotFound, match="no verified checkpoint"):
        choose_checkpoint("r", [entry(300, verified=False)], None, False)
    assert choose_checkpoint("r", [entry(300, verified=False)], None, True)["step"] == 300


def test_download_verifies_and_writes_the_manifest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = fake_with(entry(300, verified=False), entry(200))
    out = tmp_path / "out"
    result = invoke(monkeypatch, "get", fake, "get", "train", "--checkpoint", "-d", str(out))
    assert result.exit_code == 0, result.output
    step_dir = out / "step-0000000200"
    assert (step_dir / "model.pt").read_bytes() == FILES["model.pt"]
    assert (step_dir / "sub" / "opt.pt").read_bytes() == FILES["sub/opt.pt"]
    manifest = json.loads((step_dir / "tau-checkpoint.json").read_text())
    assert manifest["format"] == 1 and manifest["step"] == 200
    assert manifest["run_id"] == "train-x7k2p"
    assert manifest["files"] == entry(200)["files"]
    assert manifest["total_size"] == entry(200)["size"]
    assert "checkpoint step 200 of train-x7k2p (verified): 2 file(s)" in result.stdout
    assert not list(out.rglob("*.part"))


def test_the_servers_manifest_is_kept_when_it_serves_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = fake_with(entry(200))
    original = b'{"format": 1, "step": 200, "note": "as written by the SDK"}\n'
    fake.files[(200, "tau-checkpoint.json")] = original
    invoke(monkeypatch, "get", fake, "get", "train", "--checkpoint", "200", "-d", str(tmp_path))
    assert (tmp_path / "step-0000000200" / "tau-checkpoint.json").read_bytes() == original


def test_a_corrupt_download_is_not_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = fake_with(entry(200))
    fake.files[(200, "model.pt")] = b"bit rot"
    result = invoke(monkeypatch, "get", fake, "get", "t", "--checkpoint", "-d", str(tmp_path))
    assert isinstance(result.exception, TauError)
    assert "did not match their sha256" in result.exception.message
    assert not (tmp_path / "step-0000000200" / "model.pt").exists()
    assert not list(tmp_path.rglob("*.part"))


def test_unverified_needs_force_and_bad_step_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = fake_with(entry(300, verified=False))
    d = str(tmp_path)
    result = invoke(monkeypatch, "get", fake, "get", "t", "--checkpoint", "300", "-d", d)
    assert isinstance(result.exception, Conflict) and not (tmp_path / "step-0000000300").exists()
    result = invoke(monkeypatch, "get", fake, "get", "t", "--checkpoint", "300", "--force", "-d", d)
    assert result.exit_code == 0 and "NOT verified" in result.stdout
    result = invoke(monkeypatch, "get", fake, "get", "t", "--checkpoint", "x", "-d", d)
    assert result.exception is not None and result.exception.args[0].startswith("--checkpoint")


def test_json_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = fake_with(entry(200))
    result = invoke(
        monkeypatch, "get", fake, "get", "t", "--checkpoint", "-d", str(tmp_path), "-o", "json"
    )
    data = json.loads(result.stdout)
    assert data["step"] == 200 and data["verified"] is True
    assert data["dir"] == str(tmp_path.resolve() / "step-0000000200")
    assert [f["path"] for f in data["files"]] == ["model.pt", "sub/opt.pt"]


def attempt(n: int, finished: bool = True, resumed: int | None = None) -> dict[str, Any]:
    return {
        "attempt": n,
        "finished_at": 1.0 if finished else None,
        "resumed_from": None if resumed is None else {"step": resumed, "path": f"/ck/{resumed}"},
    }


def test_next_attempt_number() -> None:
    assert next_attempt({"state": "QUEUED", "attempt_list": []}) == 0
    assert next_attempt({"state": "QUEUED", "attempt_list": [attempt(0)]}) == 1
    # already admitted when we looked: the new attempt is listed and has not finished
    assert next_attempt({"state": "RUNNING", "attempt_list": [attempt(0), attempt(1, False)]}) == 1


def test_resume_line() -> None:
    resumed = {"id": "t-1", "state": "QUEUED"}
    ck = {"step": 200, "verified": True}
    d = {"attempt_list": [attempt(0)], "checkpoints": [{"step": 300, "verified": False}, ck]}
    assert resume_line(resumed, d, 1) == (
        "run t-1 resumed as attempt 1 (QUEUED); newest verified checkpoint: step 200"
    )
    d = {"attempt_list": [attempt(0), attempt(1, False, 200)], "checkpoints": []}
    assert resume_line(resumed, d, 1).endswith(
        "(QUEUED), resumed from checkpoint step 200 (/ck/200)"
    )
    d = {"attempt_list": [attempt(0)], "checkpoints": []}
    assert resume_line(resumed, d, 1).endswith(
        "no verified checkpoint, so it starts from the beginning"
    )
    assert resume_line(resumed, {"attempt_list": []}, 0) == "run t-1 resumed as attempt 0 (QUEUED)"


def test_resume_command(monkeypatch: pytest.MonkeyPatch) -> None:
    run = {"id": "t-1", "state": "FAILED", "attempts": 1, "attempt_list": [attempt(0)]}
    fake = FakeClient({"t": run, "t-1": run})
    result = invoke(monkeypatch, "resume", fake, "resume", "t")
    assert result.exit_code == 0, result.output
    assert fake.resumed == ["t"]
    assert result.stdout.startswith("run t-1 resumed as attempt 1")
    result = invoke(monkeypatch, "resume", fake, "resume", "t", "-o", "json")
    assert json.loads(result.stdout)["state"] == "QUEUED"
