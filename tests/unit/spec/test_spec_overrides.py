"""--set key=value: dotted paths, typed values, string fields kept as text, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from taugrid.errors import SpecError
from taugrid.spec import LoadedSpec, load_spec


def load(tmp_path: Path, text: str, *overrides: str) -> LoadedSpec:
    spec_file = tmp_path / "tau.yaml"
    spec_file.write_text(text)
    return load_spec(spec_file, overrides)


def errors(tmp_path: Path, text: str, *overrides: str) -> list[str]:
    with pytest.raises(SpecError) as caught:
        load(tmp_path, text, *overrides)
    return [str(p) for p in caught.value.problems]


def test_dotted_paths_and_typed_values(tmp_path: Path) -> None:
    loaded = load(
        tmp_path,
        "command: x\nresources: {gpus: 1, memory: 8Gi}\n",
        "resources.gpus=2",
        "resources.cpus=1.5",
        'exclude=["a", "b"]',
        "restart={max: 2, on: [error]}",
        "timeout=90",
    )
    assert loaded.spec.resources.gpus == 2
    assert loaded.spec.resources.memory == "8Gi"  # untouched sibling
    assert loaded.spec.resources.cpus == 1.5
    assert loaded.spec.exclude == ["a", "b"]
    assert loaded.spec.restart.max == 2
    assert loaded.spec.restart.on == ["error"]
    assert loaded.spec.timeout == "90s"
    assert loaded.overrides == [
        "resources.gpus=2",
        "resources.cpus=1.5",
        'exclude=["a", "b"]',
        "restart={max: 2, on: [error]}",
        "timeout=90",
    ]


def test_string_fields_keep_raw_text(tmp_path: Path) -> None:
    loaded = load(
        tmp_path,
        "command: x\n",
        "env.LR=1e-3",
        "env.DEBUG=true",
        "env.EMPTY=",
        "experiment.tags.lr=3e-4",
        "name=null-run",
        "image=ghcr.io/a/b:1.0",
        "command=python train.py --x=1",
    )
    assert loaded.spec.env == {"LR": "1e-3", "DEBUG": "true", "EMPTY": ""}
    assert loaded.spec.experiment is not None
    assert loaded.spec.experiment.tags == {"lr": "3e-4"}
    assert loaded.spec.name == "null-run"
    assert loaded.spec.image == "ghcr.io/a/b:1.0"
    assert loaded.spec.command == "python train.py --x=1"  # split on the first '=' only


def test_command_takes_a_yaml_list(tmp_path: Path) -> None:
    loaded = load(tmp_path, "command: x\n", "command=[python, train.py]")
    assert loaded.spec.command == ["python", "train.py"]


def test_empty_value_unsets_optional_field(tmp_path: Path) -> None:
    loaded = load(tmp_path, "command: x\nimage: a\ntimeout: 1h\n", "image=", "timeout=")
    assert loaded.spec.image is None
    assert loaded.spec.timeout is None


def test_later_override_wins(tmp_path: Path) -> None:
    loaded = load(tmp_path, "command: x\n", "nodes=2", "nodes=3")
    assert loaded.spec.nodes == 3


def test_override_creates_and_replaces_sections(tmp_path: Path) -> None:
    loaded = load(tmp_path, "command: x\nexperiment:\n", "experiment.name=sweep")
    assert loaded.spec.experiment is not None
    assert loaded.spec.experiment.name == "sweep"


def test_unknown_paths_suggest(tmp_path: Path) -> None:
    assert errors(tmp_path, "command: x\n", "resources.gpu=1", "comand=x", "nodes.x=1") == [
        "--set: resources.gpu: unknown field 'gpu' in resources, did you mean 'gpus'?",
        "--set: comand: unknown field 'comand', did you mean 'command'?",
        "--set: nodes.x: nodes is a single value and has no field 'x'; set it whole",
    ]


def test_malformed_overrides(tmp_path: Path) -> None:
    assert errors(tmp_path, "command: x\n", "gpus", "=1", "resources..gpus=1", "nodes=[1") == [
        "--set: gpus: 'gpus' is not key=value (e.g. --set resources.gpus=2)",
        "--set: '=1' has an empty key or path segment",
        "--set: resources..gpus: 'resources..gpus=1' has an empty key or path segment",
        "--set: nodes: invalid YAML: this [ list is not closed: add ']' (or a ',' between items)",
    ]


def test_validation_errors_point_at_the_override(tmp_path: Path) -> None:
    text = "command: x\nresources: {gpus: 1}\n"
    assert errors(
        tmp_path, text, "resources.gpus=-1", "env.TAU_X=1", "resources={gpu: 1}", "nodes=2"
    ) == [
        "--set env.TAU_X=1: env.TAU_X: names starting with TAU_ are reserved for TauGrid",
        "--set resources={gpu: 1}: resources.gpu: unknown field 'gpu', did you mean 'gpus'?",
    ]


def test_override_fixes_a_file_error(tmp_path: Path) -> None:
    loaded = load(tmp_path, "command: x\nnodes: 0\nworkdir: gone\n", "nodes=1", "workdir=.")
    assert loaded.spec.nodes == 1
    assert loaded.workdir == tmp_path.resolve()


def test_bad_override_workdir(tmp_path: Path) -> None:
    assert errors(tmp_path, "command: x\n", "workdir=gone") == [
        f"--set workdir=gone: workdir: {tmp_path.absolute()}/gone does not exist"
    ]
