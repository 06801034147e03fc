"""Properties: names, overrides vs. file values, idempotent overrides, durations."""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from taugrid.errors import SpecError
from taugrid.spec import STARTER_TAU_YAML, LoadedSpec, load_spec, parse_duration
from taugrid.spec.loader import derive_name
from taugrid.spec.models import NAME_MAX, NAME_PATTERN

names = st.from_regex(r"\A[a-z]([-a-z0-9]{0,55}[a-z0-9])?\Z")
env_names = st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_]{0,20}\Z").filter(
    lambda n: not n.startswith("TAU_")
)


def load_text(text: str, overrides: list[str]) -> LoadedSpec:
    with tempfile.TemporaryDirectory() as directory:
        spec_file = Path(directory) / "tau.yaml"
        spec_file.write_text(text, encoding="utf-8")
        return load_spec(spec_file, overrides)


@given(names)
def test_any_valid_name_round_trips(name: str) -> None:
    loaded = load_text(f"name: {name}\ncommand: x\n", [])
    assert loaded.spec.name == name
    assert loaded.resolved["name"] == name
    assert load_text("name: x\ncommand: x\n", [f"name={name}"]).spec.name == name


@given(st.text(max_size=100))
def test_derived_names_are_always_valid(text: str) -> None:
    name = derive_name(text)
    assert len(name) <= NAME_MAX
    assert re.fullmatch(NAME_PATTERN, name)


# BMP only: json.dumps writes astral characters as surrogate pairs, which YAML rejects.
env_values = st.text(st.characters(max_codepoint=0xFFFF, exclude_categories=["Cs"]), max_size=40)


@given(gpus=st.integers(0, 64), key=env_names, value=env_values)
def test_override_equals_writing_the_value_in_the_file(gpus: int, key: str, value: str) -> None:
    base = "name: prop\ncommand: [run, '${" + key + "}']\n"
    in_file = load_text(
        base + f"resources: {{gpus: {gpus}}}\nenv: {{{key}: {json.dumps(value)}}}\n", []
    )
    by_override = load_text(base, [f"resources.gpus={gpus}", f"env.{key}={value}"])
    assert by_override.resolved == in_file.resolved
    assert by_override.spec_hash == in_file.spec_hash


@given(
    overrides=st.lists(
        st.sampled_from(
            ["nodes=2", "resources.gpus=4", "env.A=1", "env.A=2", "timeout=1h", "image=x"]
        ),
        max_size=5,
    )
)
def test_repeating_the_overrides_changes_nothing(overrides: list[str]) -> None:
    once = load_text("name: p\ncommand: x\n", overrides)
    twice = load_text("name: p\ncommand: x\n", overrides + overrides)
    assert once.resolved == twice.resolved
    assert once.spec_hash == twice.spec_hash


@given(st.lists(st.tuples(st.integers(0, 10_000), st.sampled_from(["ms", "s", "m", "h", "d"]))))
def test_duration_is_the_sum_of_its_parts(parts: list[tuple[int, str]]) -> None:
    seconds = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
    text = "".join(f"{n}{unit}" for n, unit in parts)
    if text:
        expected = sum(n * seconds[unit] for n, unit in parts)
        assert abs(parse_duration(text) - expected) < 1e-6 * max(1.0, expected)


yaml_ish = st.text(st.sampled_from(list("abc:-[]{}, \n\t'\"#&*!|>$%@`?=0123456789")), max_size=60)


@given(st.one_of(yaml_ish, st.text(max_size=60)), st.lists(st.text(max_size=20), max_size=3))
def test_any_input_loads_or_raises_spec_error(text: str, overrides: list[str]) -> None:
    try:
        load_text(text, overrides)
    except SpecError as exc:
        assert exc.problems
        assert all(p.line is None or p.line >= 1 for p in exc.problems)


@given(st.integers(0, len(STARTER_TAU_YAML) - 1), st.integers(1, 20), yaml_ish)
def test_mangled_starter_loads_or_raises_spec_error(at: int, cut: int, insert: str) -> None:
    text = STARTER_TAU_YAML[:at] + insert + STARTER_TAU_YAML[at + cut :]
    try:
        load_text(text, [])
    except SpecError as exc:
        assert exc.problems
