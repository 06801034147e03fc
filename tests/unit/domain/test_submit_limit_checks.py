"""Submission limits: every problem named by field, never with the value."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from taugrid.domain.fingerprint import request_hash, spec_hash
from taugrid.domain.submit_limits import (
    MAX_COMMAND_BYTES,
    MAX_ENV_ENTRY_BYTES,
    MAX_ENV_VARS,
    MAX_ITEMS,
    MAX_SPEC_TEXT_BYTES,
    is_workspace_name,
    submission_problems,
)
from taugrid.spec import spec_from_command

MARK = "MARKER-VALUE"


def _spec(**fields: Any) -> dict[str, Any]:
    return {"name": "job", "command": ["python", "train.py"], "env": {}, **fields}


def _fields(**kw: Any) -> dict[str, str]:
    problems = submission_problems(**kw)
    assert all(MARK not in message and MARK not in field for field, message in problems)
    return dict(problems)


def test_a_plain_submission_has_no_problems() -> None:
    resolved = spec_from_command(["python", "x.py"], Path.cwd()).resolved
    assert submission_problems(resolved=resolved, spec_source="tau.yaml", file_text="a: 1\n") == []


@pytest.mark.parametrize(
    ("resolved", "field"),
    [
        (_spec(outputs=[f"{MARK}\0x"]), "outputs[0]"),
        (_spec(outputs=["ok", f"{MARK}\x1b[2J"]), "outputs[1]"),
        (_spec(workdir=f"{MARK}\n"), "workdir"),  # no newline in a path
        (_spec(command=["python", f"{MARK}\0"]), "command[1]"),
        (_spec(command=f"echo {MARK}\0"), "command"),
        (_spec(setup=f"{MARK}\x07"), "setup"),
        (_spec(env={"LR": f"{MARK}\0"}), "env.LR"),
        (_spec(experiment={"name": "e", "tags": {"k": f"{MARK}\x00"}}), "experiment.tags.k"),
        (_spec(exclude=[f"{MARK}\ud800"]), "exclude[0]"),
    ],
)
def test_control_characters_are_refused_with_the_field(
    resolved: dict[str, Any], field: str
) -> None:
    problems = _fields(resolved=resolved)
    assert field in problems, problems
    assert "control character" in problems[field] or "not valid text" in problems[field]


def test_free_text_keeps_tabs_and_newlines() -> None:
    resolved = _spec(command="set -e\n\techo hi\r\n", setup="cd x\n", env={"PEM": "a\nb"})
    assert submission_problems(resolved=resolved, file_text="a: 1\r\n\tb\n") == []


def test_a_key_that_is_not_a_plain_name_is_shown_by_position() -> None:
    problems = _fields(resolved=_spec(env={"OK": "1", f"{MARK}\0": "v"}))
    assert "env[#1]" in problems


def test_sizes_and_counts() -> None:
    big_command = _spec(command="x" * (MAX_COMMAND_BYTES - 9), setup="y" * 10)
    assert "command" in _fields(resolved=big_command)
    many_env = _spec(env={f"V{i}": "1" for i in range(MAX_ENV_VARS + 1)})
    problems = _fields(resolved=many_env)
    assert list(problems) == ["env"] and "1001 variables" in problems["env"]  # one line
    env_and_secrets = _spec(
        env={f"V{i}": "1" for i in range(600)}, secrets={f"S{i}": "s" for i in range(401)}
    )
    assert "env" in _fields(resolved=env_and_secrets)
    long_value = _spec(env={"BIG": "v" * MAX_ENV_ENTRY_BYTES})
    assert "env.BIG" in _fields(resolved=long_value)
    assert "outputs" in _fields(resolved=_spec(outputs=["o"] * (MAX_ITEMS + 1)))
    assert "exclude[0]" in _fields(resolved=_spec(exclude=["e" * 5000]))
    assert "workspace" in _fields(resolved=_spec(workspace="w" * 64))
    deep: Any = "x"
    for _ in range(40):
        deep = {"k": deep}
    assert any("nested" in m for m in _fields(resolved=_spec(experiment=deep)).values())


def test_request_fields_are_prefixed() -> None:
    problems = _fields(
        resolved=_spec(),
        spec_source=f"{MARK}\0",
        file_text="x" * (MAX_SPEC_TEXT_BYTES + 1),
        overrides=[f"env.A={MARK}\0"],
        submitter="s" * 300,
        env={"PATH": f"{MARK}\0"},
        code={"git": {"diff": "d" * (5 << 20)}},
        rerun_of="r" * 64,
    )
    assert set(problems) == {
        "request.spec_source",
        "request.file_text",
        "request.overrides[0]",
        "request.submitter",
        "request.env.PATH",
        "request.code",
        "request.rerun_of",
    }
    assert problems["request.file_text"] == "is 1048577 bytes; at most 1048576 bytes (1.0 MiB)"


def test_workspace_names() -> None:
    assert is_workspace_name("default") and is_workspace_name("team-a.vision")
    for bad in ("", "A", "-a", "a" * 64, "a/b", "a\0"):
        assert not is_workspace_name(bad), bad


def test_spec_hash_is_the_loaders_and_request_hash_ignores_the_machine_records() -> None:
    loaded = spec_from_command(["python", "x.py"], Path.cwd(), ["env.LR=0.1"])
    assert spec_hash(loaded.resolved) == loaded.spec_hash
    one = request_hash(loaded.resolved, "d" * 64, None)
    assert one == request_hash(dict(reversed(loaded.resolved.items())), "d" * 64, None)
    assert one != request_hash({**loaded.resolved, "name": "other"}, "d" * 64, None)
    assert one != request_hash(loaded.resolved, "e" * 64, None)
    assert one != request_hash(loaded.resolved, "d" * 64, "run-aaaaa")
