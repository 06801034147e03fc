"""Rerun (`tau rerun`): the new spec is the recorded one with more overrides; the payload
reuses the record; a bad override raises one SpecError with every problem."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from taugrid.errors import SpecError
from taugrid.spec import LoadedSpec, load_spec, spec_from_command
from taugrid.spec.rerun import rerun_payload, respec

DIGEST = "ab" * 32
GIT = {
    "commit": "c0ffee" * 6 + "abcd",
    "branch": "main",
    "dirty": True,
    "diff": "diff --git a/x b/x\n",
    "diff_truncated": False,
    "untracked": ["new.py"],
}
PYENV = {"version": "3.11.7", "implementation": "CPython", "executable": "/p", "packages": {}}


def record_of(loaded: LoadedSpec, run_id: str = "exp-abcde") -> dict[str, Any]:
    """A run detail as the server returns it for a run submitted from ``loaded``."""
    return {
        "id": run_id,
        "name": loaded.resolved["name"],
        "state": "SUCCEEDED",
        "spec": {
            "source": loaded.source,
            "file_text": loaded.file_text,
            "overrides": loaded.overrides,
            "resolved": loaded.resolved,
            "hash": loaded.spec_hash,
            "snapshot_digest": DIGEST,
        },
        "env": {"PATH": "/usr/bin", "LANG": "C.UTF-8"},
        "code": {"snapshot_digest": DIGEST, "git": GIT},
        "python_env": PYENV,
    }


def spec_file(tmp_path: Path, text: str) -> Path:
    proj = tmp_path / "proj"
    proj.mkdir(exist_ok=True)
    (proj / "tau.yaml").write_text(text)
    return proj / "tau.yaml"


SPEC = (
    "name: exp\n"
    "command: python train.py --lr ${LR} --seed ${SEED}\n"
    "env:\n  LR: '0.1'\n  SEED: '1'\n"
    "experiment: {name: sweep, tags: {lr: '0.1'}}\n"
)


def test_no_new_override_resolves_to_the_same_spec_and_hash(tmp_path: Path) -> None:
    loaded = load_spec(spec_file(tmp_path, SPEC), ["env.SEED=2"])
    again = respec(record_of(loaded)["spec"], [])
    assert again.resolved == loaded.resolved
    assert again.spec_hash == loaded.spec_hash
    assert again.overrides == ["env.SEED=2"]


def test_new_overrides_apply_after_the_recorded_ones_like_tau_run(tmp_path: Path) -> None:
    path = spec_file(tmp_path, SPEC)
    first = load_spec(path, ["env.SEED=2", "resources.gpus=1"])
    again = respec(record_of(first)["spec"], ["env.LR=0.5", "resources.gpus=0"])
    direct = load_spec(path, ["env.SEED=2", "resources.gpus=1", "env.LR=0.5", "resources.gpus=0"])
    assert again.resolved == direct.resolved and again.spec_hash == direct.spec_hash
    assert again.overrides == ["env.SEED=2", "resources.gpus=1", "env.LR=0.5", "resources.gpus=0"]
    # ${LR} in the command follows the new value, as `tau run --set env.LR=0.5` would.
    assert again.resolved["command"] == "python train.py --lr 0.5 --seed 2"
    assert again.resolved["resources"]["gpus"] == 0


def test_the_original_directory_is_not_needed(tmp_path: Path) -> None:
    path = spec_file(tmp_path, SPEC + "workdir: src\n")
    (path.parent / "src").mkdir()
    loaded = load_spec(path)
    shutil.rmtree(path.parent)  # gone, or rerun from another machine
    again = respec(record_of(loaded)["spec"], ["env.LR=0.2"])
    assert again.resolved["workdir"] == "src" and again.resolved["env"]["LR"] == "0.2"


def test_a_command_line_run_reruns_its_recorded_command(tmp_path: Path) -> None:
    loaded = spec_from_command(["python", "-c", "print(1)"], tmp_path, ["env.X=1"])
    again = respec(record_of(loaded)["spec"], ["env.X=2", "timeout=1h"])
    direct = spec_from_command(
        ["python", "-c", "print(1)"], tmp_path, ["env.X=1", "env.X=2", "timeout=1h"]
    )
    assert again.resolved == direct.resolved and again.spec_hash == direct.spec_hash
    assert again.resolved["name"] == "python"


def test_bad_overrides_raise_one_spec_error_with_every_problem(tmp_path: Path) -> None:
    loaded = load_spec(spec_file(tmp_path, SPEC))
    with pytest.raises(SpecError) as caught:
        respec(record_of(loaded)["spec"], ["resources.gpus=many", "bogus=1", "nodes=0"])
    assert caught.value.exit_code == 2
    lines = [str(p) for p in caught.value.problems]
    assert "--set: bogus: unknown field 'bogus'" in lines
    assert any(line.startswith("--set resources.gpus=many: resources.gpus:") for line in lines)
    assert any(line.startswith("--set nodes=0: nodes:") for line in lines)


def test_payload_reuses_the_record(tmp_path: Path) -> None:
    loaded = load_spec(spec_file(tmp_path, SPEC))
    record = record_of(loaded)
    payload = rerun_payload(record, ["env.LR=0.3"], "bob")
    assert payload == {
        "spec_source": str(tmp_path / "proj" / "tau.yaml"),
        "file_text": SPEC,
        "overrides": ["env.LR=0.3"],
        "resolved": respec(record["spec"], ["env.LR=0.3"]).resolved,
        "spec_hash": respec(record["spec"], ["env.LR=0.3"]).spec_hash,
        "snapshot_digest": DIGEST,
        "submitter": "bob",
        "env": {"PATH": "/usr/bin", "LANG": "C.UTF-8"},
        "code": {"git": GIT},
        "python_env": PYENV,
        "rerun_of": "exp-abcde",
    }


def test_payload_of_a_record_without_code_or_python(tmp_path: Path) -> None:
    record = record_of(load_spec(spec_file(tmp_path, SPEC)))
    del record["code"], record["python_env"]
    payload = rerun_payload(record, [], "bob")
    assert payload["code"] is None and payload["python_env"] is None
