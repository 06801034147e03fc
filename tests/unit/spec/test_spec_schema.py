"""JSON Schema, the starter tau.yaml, and which fields are inert in each mode."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from taugrid.spec import STARTER_TAU_YAML, TauSpec, inactive_fields, json_schema, load_spec

# jsonschema is not a dependency; this checks the keywords our schema uses, enough to see
# that the schema accepts the starter and rejects what the loader rejects.


def schema_errors(value: Any, schema: dict[str, Any], root: dict[str, Any]) -> list[str]:
    if "$ref" in schema:
        name = schema["$ref"].removeprefix("#/$defs/")
        return schema_errors(value, root["$defs"][name], root)
    if "anyOf" in schema:
        branches = [schema_errors(value, branch, root) for branch in schema["anyOf"]]
        return [] if any(not b for b in branches) else [f"{value!r} matches no branch"]
    kinds: dict[str, type | tuple[type, ...]] = {
        "object": dict,
        "array": list,
        "string": str,
        "integer": int,
        "number": (int, float),
        "null": type(None),
    }
    kind = schema.get("type")
    if kind and (not isinstance(value, kinds[kind]) or isinstance(value, bool)):
        return [f"{value!r} is not {kind}"]
    errors: list[str] = []
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        errors += [f"missing {k}" for k in schema.get("required", []) if k not in value]
        extra = schema.get("additionalProperties", True)
        patterns = schema.get("patternProperties", {})
        forbidden = schema.get("propertyNames", {}).get("not", {}).get("pattern")
        for key, item in value.items():
            if forbidden and re.search(forbidden, key):
                errors.append(f"forbidden name {key}")
            matched = [p for p in patterns if re.search(p, key)]
            if key in properties:
                errors += schema_errors(item, properties[key], root)
            elif matched:
                errors += schema_errors(item, patterns[matched[0]], root)
            elif extra is False:
                errors.append(f"unknown {key}")
            elif isinstance(extra, dict):
                errors += schema_errors(item, extra, root)
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            errors.append("too few items")
        for item in value:
            errors += schema_errors(item, schema.get("items", {}), root)
    if isinstance(value, str):
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errors.append(f"{value!r} does not match {schema['pattern']}")
        if len(value) > schema.get("maxLength", len(value)):
            errors.append("too long")
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{value!r} not in enum")
    if isinstance(value, (int, float)) and value < schema.get("minimum", value):
        errors.append("below minimum")
    if isinstance(value, (int, float)) and "exclusiveMinimum" in schema:
        errors += [] if value > schema["exclusiveMinimum"] else ["not above minimum"]
    return errors


def validate(value: Any) -> list[str]:
    schema = json_schema()
    return schema_errors(value, schema, schema)


def uncommented(text: str) -> str:
    """The starter with every optional setting switched on."""
    return re.sub(r"^(\s*)# ([a-z_]+: )", r"\1\2", text, flags=re.MULTILINE)


def test_schema_header_and_strictness() -> None:
    schema = json_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["title"] == "tau.yaml"
    assert schema["required"] == ["command"]
    assert schema["additionalProperties"] is False
    assert all(d["additionalProperties"] is False for d in schema["$defs"].values())


def test_every_field_has_a_description() -> None:
    schema = json_schema()
    objects = [schema, *schema["$defs"].values()]
    for obj in objects:
        assert obj.get("description"), obj["title"]
        for name, prop in obj["properties"].items():
            if "$ref" in prop and "description" not in prop:
                # pydantic drops a field description equal to its model's docstring
                prop = schema["$defs"][prop["$ref"].removeprefix("#/$defs/")]
            assert prop.get("description"), name


def test_schema_accepts_starter_and_full_example() -> None:
    yaml = YAML(typ="safe", pure=True)
    assert validate(yaml.load(STARTER_TAU_YAML)) == []
    assert validate(yaml.load(uncommented(STARTER_TAU_YAML))) == []


@pytest.mark.parametrize(
    "data",
    [
        {"command": "x", "comand": "x"},
        {"command": "x", "resources": {"gpu": 1}},
        {"name": "x"},
        {"command": []},
        {"command": "x", "name": "Bad_Name"},
        {"command": "x", "nodes": 0},
        {"command": "x", "env": {"A": 1}},
        {"command": "x", "env": {"bad-name": "1"}},
        {"command": "x", "env": {"TAU_RUN_ID": "1"}},
        {"command": "x", "timeout": "soon"},
        {"command": "x", "resources": {"memory": "512m"}},
        {"command": "x", "launcher": "mpi"},
        {"command": "x", "resources": {"gpus": True}},
    ],
)
def test_schema_rejects(data: dict[str, Any]) -> None:
    assert validate(data) != []


def test_starter_loads(tmp_path: Path) -> None:
    (tmp_path / "tau.yaml").write_text(STARTER_TAU_YAML)
    loaded = load_spec(tmp_path / "tau.yaml")
    assert loaded.spec.command == "python train.py"


def test_starter_with_every_option_on_loads(tmp_path: Path) -> None:
    (tmp_path / "tau.yaml").write_text(uncommented(STARTER_TAU_YAML))
    spec = load_spec(tmp_path / "tau.yaml").spec
    assert spec.name == "my-run"
    assert spec.image is not None
    assert spec.restart.max == 3
    assert spec.resources.memory == "16Gi"


def test_starter_shows_every_field() -> None:
    shown = set(re.findall(r"^\s*#? ?([a-z_]+):", STARTER_TAU_YAML, flags=re.MULTILINE))
    assert set(TauSpec.model_fields) <= shown
    for nested in ("gpus", "gpu_type", "cpus", "memory"):
        assert nested in shown


def spec_of(tmp_path: Path, text: str) -> TauSpec:
    (tmp_path / "tau.yaml").write_text(text)
    return load_spec(tmp_path / "tau.yaml").spec


def test_nothing_inactive_for_a_plain_spec(tmp_path: Path) -> None:
    spec = spec_of(tmp_path, "command: x\nresources: {gpus: 2}\nenv: {A: b}\n")
    assert inactive_fields(spec, "local") == []
    assert inactive_fields(spec, "cluster") == []


def test_inactive_fields_local(tmp_path: Path) -> None:
    spec = spec_of(tmp_path, uncommented(STARTER_TAU_YAML).replace("nodes: 1", "nodes: 2"))
    found = inactive_fields(spec, "local")
    assert found == [
        "image: ghcr.io/acme/train:1.4 has no effect in local mode "
        "(local mode runs in the submitter's environment)",
    ]  # nodes: 2 is no note but a refusal (tests/unit/spec/test_spec_modes.py)
    assert inactive_fields(spec, "cluster") == []


def test_no_note_for_launcher_checkpoint_or_queue(tmp_path: Path) -> None:
    spec = spec_of(tmp_path, "command: x\nlauncher: ray\nqueue: fast\ncheckpoint: {keep: 5}\n")
    assert inactive_fields(spec, "local") == []  # launcher: ray is refused, not ignored
    torchrun = spec_of(tmp_path, "command: x\nlauncher: torchrun\n")
    assert inactive_fields(torchrun, "local") == []
