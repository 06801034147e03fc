"""The resolved spec, its hash, name and workdir defaults, units, spec_from_command."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import pytest

from taugrid.errors import SpecError
from taugrid.spec import (
    LoadedSpec,
    TauSpec,
    load_spec,
    parse_duration,
    quantity_bytes,
    spec_from_command,
)
from taugrid.spec.loader import derive_name


def write(directory: Path, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tau.yaml").write_text(text, encoding="utf-8")
    return directory / "tau.yaml"


def test_resolved_has_every_default_in_field_order(tmp_path: Path) -> None:
    loaded = load_spec(write(tmp_path / "mnist", "command: python train.py\n"))
    assert loaded.resolved == {
        "name": "mnist",
        "workspace": "default",
        "queue": None,  # the server fills in the workspace's default queue
        "priority": None,
        "experiment": None,
        "workdir": ".",
        "exclude": [],
        "image": None,
        "setup": None,
        "command": "python train.py",
        "env": {},
        "secrets": {},
        "resources": {
            "gpus": 0,
            "gpu_type": None,
            "cpus": None,
            "memory": None,
            "disk": None,
            "procs_per_node": None,
        },
        "nodes": 1,
        "launcher": "command",
        "checkpoint": {"keep": 3},
        "restart": {"max": 0, "on": ["error", "preemption", "hardware"], "backoff": "30s"},
        "stop_grace": "60s",
        "timeout": None,
        "outputs": [],
    }
    assert list(loaded.resolved) == list(TauSpec.model_fields)  # stable: field order
    json.dumps(loaded.resolved)  # JSON-able


def test_loaded_spec_fields(tmp_path: Path) -> None:
    text = "command: [python, t.py]\nworkdir: src\n"
    (tmp_path / "src").mkdir()
    loaded = load_spec(write(tmp_path, text), ["nodes=1"])
    assert loaded.source == str(tmp_path / "tau.yaml")
    assert loaded.file_text == text
    assert loaded.overrides == ["nodes=1"]
    assert loaded.workdir == (tmp_path / "src").resolve()
    assert loaded.workdir.is_absolute()
    assert len(loaded.spec_hash) == 64
    with pytest.raises(dataclasses.FrozenInstanceError):
        loaded.spec_hash = "x"  # type: ignore[misc]


def test_hash_ignores_key_order_and_formatting(tmp_path: Path) -> None:
    a = load_spec(write(tmp_path / "a" / "run", "command: x\nenv: {A: '1', B: '2'}\nnodes: 1\n"))
    b = load_spec(
        write(tmp_path / "b" / "run", "# comment\nenv:\n  B: '2'\n  A: '1'\ncommand: x\n")
    )
    assert a.resolved == b.resolved
    assert list(a.resolved["env"]) == ["A", "B"]
    assert list(b.resolved["env"]) == ["A", "B"]
    assert a.spec_hash == b.spec_hash


def test_hash_changes_with_any_value(tmp_path: Path) -> None:
    base = load_spec(write(tmp_path / "run", "command: x\n")).spec_hash
    assert load_spec(write(tmp_path / "run", "command: y\n")).spec_hash != base
    assert load_spec(tmp_path / "run" / "tau.yaml", ["resources.gpus=1"]).spec_hash != base
    assert load_spec(tmp_path / "run" / "tau.yaml", ["env.A=1"]).spec_hash != base


def test_hash_is_sha256_of_canonical_json(tmp_path: Path) -> None:
    loaded = load_spec(write(tmp_path, "command: x\nenv: {E: ü}\n"))
    canonical = json.dumps(
        loaded.resolved, sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    assert loaded.spec_hash == hashlib.sha256(canonical.encode()).hexdigest()


@pytest.mark.parametrize(
    ("raw", "name"),
    [
        ("mnist", "mnist"),
        ("My_Project 2", "my-project-2"),
        ("2024-sweep", "sweep"),
        ("--weird--", "weird"),
        ("__", "run"),
        ("", "run"),
        ("x" * 80, "x" * 57),
        ("a" + "-" * 56 + "b", "a-b"),
        ("a" * 56 + "-b", "a" * 56),
    ],
)
def test_derive_name(raw: str, name: str) -> None:
    assert derive_name(raw) == name


def test_name_from_directory_when_absent(tmp_path: Path) -> None:
    assert load_spec(write(tmp_path / "Fine_Tune", "command: x\n")).spec.name == "fine-tune"
    assert load_spec(write(tmp_path / "x", "command: x\nname: mine\n")).spec.name == "mine"


def test_spec_from_command(tmp_path: Path) -> None:
    loaded = spec_from_command(
        ["/usr/bin/Python3", "train.py", "${LR}"], tmp_path, ["env.LR=1", "resources.gpus=2"]
    )
    assert loaded.source == "<command line>"
    assert loaded.file_text is None
    assert loaded.spec.name == "python3"
    assert loaded.spec.command == ["/usr/bin/Python3", "train.py", "1"]
    assert loaded.spec.resources.gpus == 2
    assert loaded.workdir == tmp_path.resolve()
    assert loaded.resolved["workdir"] == "."


def test_spec_from_command_errors_have_no_position(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as caught:
        spec_from_command([], tmp_path, ["nodes=0"])
    assert [str(p) for p in caught.value.problems] == [
        "<command line>: command: required: the command to run "
        "(a string for the shell, or a list of argv)",
        "--set nodes=0: nodes: must be at least 1, got 0",
    ]


def test_duration_helpers(tmp_path: Path) -> None:
    assert parse_duration("30s") == 30
    assert parse_duration("5m") == 300
    assert parse_duration("24h") == 86400
    assert parse_duration("1h30m") == 5400
    assert parse_duration("500ms") == 0.5
    assert parse_duration("1.5h") == 5400
    assert parse_duration("2d") == 172800
    assert parse_duration(90) == 90
    assert parse_duration("90") == 90
    for bad in ("", "s", "1x", "1 h", "-1s", "1h-", " 1s"):
        with pytest.raises(ValueError):
            parse_duration(bad)
    loaded = load_spec(
        write(tmp_path, "command: x\nstop_grace: 10\ntimeout: 1h30m\nrestart: {backoff: 2m}\n")
    )
    assert loaded.spec.stop_grace == "10s"
    assert loaded.spec.stop_grace_seconds == 10
    assert loaded.spec.timeout_seconds == 5400
    assert loaded.spec.restart.backoff_seconds == 120


def test_quantity_helpers(tmp_path: Path) -> None:
    assert quantity_bytes("16Gi") == 16 * 2**30
    assert quantity_bytes("512Mi") == 512 * 2**20
    assert quantity_bytes("1G") == 10**9
    assert quantity_bytes("1.5Ki") == 1536
    assert quantity_bytes("1e3") == 1000
    assert quantity_bytes("0.5") == 1  # rounded up, as Kubernetes does
    assert quantity_bytes(1024) == 1024
    for bad in ("16GB", "1m", "0", "-1Gi", "Gi", "1 Gi", ""):
        with pytest.raises(ValueError):
            quantity_bytes(bad)
    loaded = load_spec(write(tmp_path, "command: x\nresources: {memory: 2048}\n"))
    assert loaded.spec.resources.memory == "2048"
    assert loaded.spec.resources.memory_bytes == 2048


def test_spec_model_round_trips_resolved(tmp_path: Path) -> None:
    loaded: LoadedSpec = load_spec(
        write(tmp_path, "command: [a, '$${X}']\nenv: {X: '1'}\nresources: {cpus: 2}\n")
    )
    again = type(loaded.spec).model_validate(loaded.resolved)
    assert again.model_dump() == loaded.spec.model_dump()
