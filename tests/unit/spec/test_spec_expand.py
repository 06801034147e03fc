"""${VAR} expansion: only the spec's own env at resolve time, $$ escapes, launch-time rest."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from taugrid.spec import EXPANSION_RULES, LoadedSpec, expand_at_launch, load_spec


def load(tmp_path: Path, text: str, *overrides: str) -> LoadedSpec:
    (tmp_path / "tau.yaml").write_text(text)
    return load_spec(tmp_path / "tau.yaml", overrides)


def test_string_command_and_setup_use_spec_env(tmp_path: Path) -> None:
    loaded = load(
        tmp_path,
        'command: python train.py --lr ${LR} --out $OUT\nsetup: echo ${LR}\nenv: {LR: "3e-4"}\n',
    )
    assert loaded.spec.command == "python train.py --lr 3e-4 --out $OUT"
    assert loaded.spec.setup == "echo 3e-4"
    assert loaded.resolved["command"] == loaded.spec.command


def test_env_values_see_only_earlier_keys(tmp_path: Path) -> None:
    text = "command: x\nenv:\n  A: '${B}-a'\n  B: b\n  C: '${B}-${A}-${C}'\n"
    loaded = load(tmp_path, text)
    assert loaded.spec.env == {"A": "${B}-a", "B": "b", "C": "b-${B}-a-${C}"}


def test_escape_in_shell_strings_becomes_plain_reference(tmp_path: Path) -> None:
    loaded = load(tmp_path, "command: echo $${LR} ${LR}\nenv: {LR: x}\n")
    assert loaded.spec.command == "echo ${LR} x"


def test_escape_survives_in_list_commands_and_env_until_launch(tmp_path: Path) -> None:
    text = "command: [echo, '$${LR}', '${LR}', '${W}']\nenv: {LR: x, W: '$${LR}'}\n"
    loaded = load(tmp_path, text)
    assert loaded.spec.command == ["echo", "$${LR}", "x", "$${LR}"]
    assert loaded.spec.env["W"] == "$${LR}"
    assert isinstance(loaded.spec.command, list)
    launched = expand_at_launch(loaded.spec.command, {"LR": "x"})
    assert launched == ["echo", "${LR}", "x", "${LR}"]


def test_submitter_environment_is_never_expanded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SUBMITTER_SECRET", "hunter2")
    text = (
        "command: [run, '${SUBMITTER_SECRET}', '${TAU_RUN_ID}', '${HF_TOKEN}']\n"
        "setup: echo ${SUBMITTER_SECRET}\n"
        "env: {X: '${SUBMITTER_SECRET}'}\n"
        "secrets: {HF_TOKEN: hf/token}\n"
    )
    loaded = load(tmp_path, text)
    assert "hunter2" not in repr(loaded.resolved)
    assert loaded.spec.command == ["run", "${SUBMITTER_SECRET}", "${TAU_RUN_ID}", "${HF_TOKEN}"]
    assert loaded.spec.setup == "echo ${SUBMITTER_SECRET}"
    assert loaded.spec.env == {"X": "${SUBMITTER_SECRET}"}
    assert os.environ["SUBMITTER_SECRET"] == "hunter2"


def test_expansion_uses_overridden_env(tmp_path: Path) -> None:
    loaded = load(tmp_path, "command: [a, '${LR}']\nenv: {LR: '1'}\n", "env.LR=2")
    assert loaded.spec.command == ["a", "2"]


def test_only_braced_references_expand(tmp_path: Path) -> None:
    loaded = load(tmp_path, "command: echo $LR ${LR:-d} ${LR}\nenv: {LR: x}\n")
    assert loaded.spec.command == "echo $LR ${LR:-d} x"


def test_expand_at_launch_leaves_unset_variables() -> None:
    env = {"TAU_RUN_ID": "mnist-ab12c", "HOME": "/home/me"}
    argv = ["${TAU_RUN_ID}", "${HOME}/x", "${NOPE}", "$${HOME}", "$HOME", "$$${HOME}"]
    assert expand_at_launch(argv, env) == [
        "mnist-ab12c",
        "/home/me/x",
        "${NOPE}",
        "${HOME}",
        "$HOME",
        "$${HOME}",
    ]


def test_rules_text_names_the_rules() -> None:
    for needle in ("${VAR}", "$${VAR}", "command", "setup", "env", "secrets", "leak"):
        assert needle in EXPANSION_RULES
