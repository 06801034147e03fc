"""Every kind of spec mistake is reported as file:line:col: field: message, all at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from taugrid.errors import SpecError, SpecProblem
from taugrid.spec import load_spec, spec_from_command


def problems(tmp_path: Path, text: str, overrides: list[str] | None = None) -> list[str]:
    spec_file = tmp_path / "tau.yaml"
    spec_file.write_text(text)
    with pytest.raises(SpecError) as caught:
        load_spec(spec_file, overrides or [])
    # Paths are relative to tmp_path so the expectations read like the CLI output.
    return [str(p).replace(f"{spec_file}", "tau.yaml") for p in caught.value.problems]


def test_unknown_key_points_at_the_key_with_did_you_mean(tmp_path: Path) -> None:
    assert problems(tmp_path, "command: x\nresources:\n  gpu: 1\n") == [
        "tau.yaml:3:3: resources.gpu: unknown field 'gpu', did you mean 'gpus'?"
    ]


def test_unknown_key_without_close_match_lists_allowed(tmp_path: Path) -> None:
    [message] = problems(tmp_path, "command: x\ncheckpoint: {zzz: 1}\n")
    assert message == "tau.yaml:2:14: checkpoint.zzz: unknown field 'zzz' (allowed: keep)"


def test_misspelled_command_is_one_message_the_did_you_mean(tmp_path: Path) -> None:
    # Not also "command: required" at 1:1, which sends the reader after a second mistake.
    assert problems(tmp_path, "name: demo\ncomand: python x.py\n") == [
        "tau.yaml:2:1: comand: unknown field 'comand', did you mean 'command'?",
    ]
    # A missing field with no near miss is still reported.
    assert problems(tmp_path, "name: demo\nzzz: 1\n")[0].startswith(
        "tau.yaml:1:1: command: required"
    )
    # A near miss in another mapping does not hide it either.
    assert problems(tmp_path, "name: demo\nresources: {comand: 1}\n")[0].startswith(
        "tau.yaml:1:1: command: required"
    )


def test_wrong_types_point_at_values(tmp_path: Path) -> None:
    text = "command: x\nnodes: two\nresources: {gpus: true, cpus: fast}\nexclude: data/\n"
    assert problems(tmp_path, text) == [
        "tau.yaml:2:8: nodes: must be an integer, got a string 'two'",
        "tau.yaml:3:19: resources.gpus: must be an integer, got a boolean true",
        "tau.yaml:3:31: resources.cpus: 'fast' is not CPU cores such as 4, 0.5 or \"500m\" "
        "(millicores)",
        "tau.yaml:4:10: exclude: must be a list, got a string 'data/'",
    ]


def test_env_values_must_be_quoted_strings(tmp_path: Path) -> None:
    text = "command: x\nenv:\n  LR: 3e-4\n  DEBUG: true\n  OK: 'yes'\n"
    assert problems(tmp_path, text) == [
        'tau.yaml:3:7: env.LR: must be a string; YAML reads 3e-4 as a number, write "3e-4"',
        'tau.yaml:4:10: env.DEBUG: must be a string; YAML reads true as a boolean, write "true"',
    ]


def test_env_names_are_checked_at_the_key(tmp_path: Path) -> None:
    text = "command: x\nenv:\n  TAU_RUN_ID: a\n  my-var: b\n"
    assert problems(tmp_path, text) == [
        "tau.yaml:3:3: env.TAU_RUN_ID: names starting with TAU_ are reserved for TauGrid",
        "tau.yaml:4:3: env.my-var: is not a valid environment variable name "
        "([A-Za-z_][A-Za-z0-9_]*)",
    ]


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("Train", "is not a DNS-1123 name"),
        ("1train", "is not a DNS-1123 name"),
        ("train-", "is not a DNS-1123 name"),
        ("tr_ain", "is not a DNS-1123 name"),
        ("a" * 58, "must be at most 57 characters (got 58)"),
    ],
)
def test_bad_names(tmp_path: Path, name: str, reason: str) -> None:
    [message] = problems(tmp_path, f"name: {name}\ncommand: x\n")
    assert message.startswith("tau.yaml:1:7: name: ")
    assert reason in message


@pytest.mark.parametrize(
    "command", ["''", "'   '", "[]", "['', x]", "{a: b}", "[python, 3]", "null"]
)
def test_bad_commands(tmp_path: Path, command: str) -> None:
    [message] = problems(tmp_path, f"command: {command}\n")
    assert message.startswith("tau.yaml:1:10: command: ")


def test_missing_workdir_points_at_value(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    assert problems(tmp_path, "command: x\nworkdir: nope\n") == [
        f"tau.yaml:2:10: workdir: {tmp_path}/nope does not exist"
    ]
    assert problems(tmp_path, "command: x\nworkdir: file\n") == [
        f"tau.yaml:2:10: workdir: {tmp_path}/file is not a directory"
    ]


def test_missing_default_workdir_points_at_start(tmp_path: Path) -> None:
    spec_file = tmp_path / "tau.yaml"
    spec_file.write_text("command: x\n")
    with pytest.raises(SpecError) as caught:
        spec_from_command(["x"], tmp_path / "gone")
    assert [p.field for p in caught.value.problems] == ["workdir"]
    assert caught.value.problems[0].line is None  # no file: nothing to point at


@pytest.mark.parametrize(
    ("field", "value", "fragment"),
    [
        ("stop_grace", "5x", "'5x' is not a duration"),
        ("stop_grace", "-3", "must not be negative"),
        ("stop_grace", "'-3s'", "'-3s' is not a duration"),
        ("stop_grace", "1.5", "must be a duration such as 30s"),
        ("stop_grace", "'1h 30m'", "is not a duration"),
        ("timeout", "0s", "must be longer than zero"),
        ("timeout", "true", "must be a duration such as 30s, 5m, 24h, 1h30m or 500ms"),
    ],
)
def test_bad_durations(tmp_path: Path, field: str, value: str, fragment: str) -> None:
    col = len(field) + 3
    [message] = problems(tmp_path, f"command: x\n{field}: {value}\n")
    assert message.startswith(f"tau.yaml:2:{col}: {field}: ")
    assert fragment in message


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("16GB", "'16GB' is not a Kubernetes quantity"),
        ("512m", "'512m' means 0.512 bytes; did you mean 512Mi or 512M?"),
        ("0", "must be positive"),
        ("-1Gi", "must be positive"),
        ("lots", "is not a Kubernetes quantity"),
        ("yes", "is not a Kubernetes quantity"),
        ("true", "must be a Kubernetes quantity such as 16Gi, 512Mi or 1G, got True"),
    ],
)
def test_bad_quantities(tmp_path: Path, value: str, fragment: str) -> None:
    [message] = problems(tmp_path, f"command: x\nresources:\n  memory: {value}\n")
    assert message.startswith("tau.yaml:3:11: resources.memory: ")
    assert fragment in message


def test_bad_outputs_point_at_each_item(tmp_path: Path) -> None:
    text = "command: x\noutputs: [ok/, /abs, a/../../up, '']\n"
    assert problems(tmp_path, text) == [
        "tau.yaml:2:16: outputs[1]: '/abs' must be a path relative to the workdir",
        "tau.yaml:2:22: outputs[2]: 'a/../../up' must stay inside the workdir (no '..')",
        "tau.yaml:2:34: outputs[3]: must not be empty",
    ]


def test_bad_literals_suggest(tmp_path: Path) -> None:
    text = "command: x\nlauncher: torchrn\nrestart: {on: [eror]}\n"
    assert problems(tmp_path, text) == [
        "tau.yaml:2:11: launcher: unknown value 'torchrn', did you mean 'torchrun'? "
        "(one of: command, torchrun, ray)",
        "tau.yaml:3:16: restart.on[0]: unknown value 'eror', did you mean 'error'? "
        "(one of: error, preemption, hardware)",
    ]


def test_null_section_explains(tmp_path: Path) -> None:
    assert problems(tmp_path, "command: x\nresources:\n") == [
        "tau.yaml:2:1: resources: must be a mapping, got null (remove the key to get the defaults)"
    ]


def test_secret_also_in_env(tmp_path: Path) -> None:
    text = "command: x\nenv: {TOKEN: a}\nsecrets: {TOKEN: hf/token}\n"
    assert problems(tmp_path, text) == [
        "tau.yaml:3:11: secrets.TOKEN: 'TOKEN' is also set in env; keep one"
    ]


def test_invalid_yaml_in_our_words_where_the_mistake_starts(tmp_path: Path) -> None:
    # The parser notices at 2:5; the list that is never closed opened at 1:10.
    [message] = problems(tmp_path, "command: [a, b\nname: x\n")
    assert message == (
        "tau.yaml:1:10: invalid YAML: this [ list is not closed: add ']' (or a ',' between items)"
    )
    [message] = problems(tmp_path, 'name: "x\ncommand: echo\n')
    assert (
        message
        == "tau.yaml:1:7: invalid YAML: this quoted string is never closed: add the closing quote"
    )
    [message] = problems(tmp_path, "name: x y: z\ncommand: echo\n")
    assert message.startswith("tau.yaml:1:10: invalid YAML: unexpected ':': quote a value")
    [message] = problems(tmp_path, "name: &a x\nother: &a y\ncommand: echo\n")
    assert message == (
        "tau.yaml:2:8: invalid YAML: &a is defined twice; each anchor may be defined once"
    )
    [message] = problems(tmp_path, "command: @x\n")
    assert (
        message
        == "tau.yaml:1:10: invalid YAML: a value cannot start with '@': put the value in quotes"
    )


def test_tab_indentation_is_invalid_yaml(tmp_path: Path) -> None:
    [message] = problems(tmp_path, "command: x\nresources:\n\tgpus: 1\n")
    assert message.startswith("tau.yaml:3:1: invalid YAML: ")


def test_every_duplicate_key_is_reported(tmp_path: Path) -> None:
    text = "command: a\nname: x\ncommand: b\nresources:\n  gpus: 1\n  gpus: 2\n"
    assert problems(tmp_path, text) == [
        "tau.yaml:3:1: command: duplicate key 'command' (first at line 1)",
        "tau.yaml:6:3: resources.gpus: duplicate key 'gpus' (first at line 5)",
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "tau.yaml:1:1: file is empty; it needs at least `command:`"),
        ("# just a comment\n", "tau.yaml:1:1: file is empty; it needs at least `command:`"),
        ("- a\n- b\n", "tau.yaml:1:1: must be a mapping of fields (name: ...)"),
        ("\n\njust text\n", "tau.yaml:3:1: must be a mapping of fields (name: ...)"),
    ],
)
def test_empty_or_not_a_mapping(tmp_path: Path, text: str, expected: str) -> None:
    assert problems(tmp_path, text) == [expected]


def test_unsupported_yaml_features(tmp_path: Path) -> None:
    text = "command: !shell x\n1: a\nbase: &b {gpus: 1}\nresources:\n  <<: *b\n"
    assert problems(tmp_path, text) == [
        "tau.yaml:1:10: command: custom YAML tag !shell is not supported",
        "tau.yaml:2:1: key 1 must be a string; quote it",
        "tau.yaml:3:1: base: unknown field 'base' (allowed: name, workspace, queue, priority, "
        "experiment, workdir, exclude, image, setup, command, env, secrets, resources, nodes, "
        "launcher, checkpoint, restart, stop_grace, timeout, outputs)",
        "tau.yaml:5:3: resources: YAML merge keys (<<) are not supported",
    ]


def test_merge_key_at_top_does_not_hide_other_problems(tmp_path: Path) -> None:
    assert problems(tmp_path, "<<: {command: x}\nnodes: 0\n") == [
        "tau.yaml:1:1: YAML merge keys (<<) are not supported",
        "tau.yaml:2:8: nodes: must be at least 1, got 0",
    ]


def test_many_problems_reported_together_in_file_order(tmp_path: Path) -> None:
    text = (
        "name: Bad\n"
        "comand: x\n"
        "resources: {gpus: -1, memory: 1GB}\n"
        "stop_grace: soon\n"
        "outputs: [/tmp]\n"
    )
    found = problems(tmp_path, text, ["nodes=0", "resources.gpu=1", "novalue"])
    assert [line.split(": ")[0] for line in found] == [
        "tau.yaml:1:7",
        "tau.yaml:2:1",
        "tau.yaml:3:19",
        "tau.yaml:3:31",
        "tau.yaml:4:13",
        "tau.yaml:5:11",
        "--set",
        "--set",
        "--set nodes=0",
    ]


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as caught:
        load_spec(tmp_path / "missing.yaml")
    [problem] = caught.value.problems
    assert problem == SpecProblem(
        str(tmp_path / "missing.yaml"), None, None, "", "cannot read: No such file or directory"
    )


def test_error_carries_code_and_problem_dicts(tmp_path: Path) -> None:
    (tmp_path / "tau.yaml").write_text("command: x\nnodes: 0\n")
    with pytest.raises(SpecError) as caught:
        load_spec(tmp_path / "tau.yaml")
    body = caught.value.to_dict()
    assert body["code"] == "spec_invalid"
    assert body["problems"] == [
        {
            "file": str(tmp_path / "tau.yaml"),
            "line": 2,
            "col": 8,
            "field": "nodes",
            "message": "must be at least 1, got 0",
        }
    ]
