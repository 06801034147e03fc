"""A problem with `--name`, `--workspace`, `--queue`, `--priority` or `--gpus` is reported
against the flag as typed; the record keeps the override texts as before."""

from __future__ import annotations

import pytest

from taugrid.cli.runflags import OVERRIDE_FILE, RunFlags, blamed_on_flags
from taugrid.errors import SpecError, SpecProblem
from taugrid.spec import overrides


def test_the_override_source_is_the_loaders() -> None:
    assert OVERRIDE_FILE == overrides.OVERRIDE_FILE


def test_overrides_are_recorded_as_before() -> None:
    flags = RunFlags(sets=("env.LR=1",), name="My_Run", gpus=2, queue="q")
    assert flags.overrides() == ["env.LR=1", "name=My_Run", "queue=q", "resources.gpus=2"]


def test_problems_of_a_shorthand_name_the_flag_as_typed() -> None:
    flags = RunFlags(sets=("env.LR=1",), name="My Run", gpus=-1)
    problems = [
        SpecProblem("--set name=My Run", None, None, "name", "not a DNS-1123 name"),
        SpecProblem("--set resources.gpus=-1", None, None, "resources.gpus", "at least 0"),
        SpecProblem("--set env.LR=1", None, None, "env.LR", "kept as it is"),
        SpecProblem("tau.yaml", 3, 1, "command", "kept as it is"),
    ]
    with pytest.raises(SpecError) as caught, blamed_on_flags(flags):
        raise SpecError(problems)
    assert caught.value.message.splitlines() == [
        "--name 'My Run': name: not a DNS-1123 name",
        "--gpus -1: resources.gpus: at least 0",
        "--set env.LR=1: env.LR: kept as it is",
        "tau.yaml:3:1: command: kept as it is",
    ]


def test_other_problems_pass_through_untouched() -> None:
    error = SpecError([SpecProblem("--set name=x", None, None, "name", "bad")])
    with pytest.raises(SpecError) as caught, blamed_on_flags(RunFlags()):
        raise error
    assert caught.value is error
