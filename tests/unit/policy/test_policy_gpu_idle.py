"""policy.yaml's gpu_idle: the idle-GPU rule a platform team sets (default: flag after 30
min under 5 %), and its mistakes reported as file:line:col."""

from __future__ import annotations

import pytest
from policy_samples import MINIMAL

from taugrid.domain.gpu_use import IdleAction, IdleRule
from taugrid.errors import SpecError
from taugrid.policy import load_policy_text
from taugrid.policy.domain import to_domain


def test_without_gpu_idle_the_default_rule_flags_after_half_an_hour() -> None:
    assert to_domain(load_policy_text(MINIMAL, "policy.yaml").policy).idle == IdleRule(
        5.0, 1800.0, IdleAction.FLAG
    )


def test_gpu_idle_is_read_into_the_rule() -> None:
    text = MINIMAL + "gpu_idle: {below: 10, after: 2h, action: stop}\n"
    assert to_domain(load_policy_text(text, "policy.yaml").policy).idle == IdleRule(
        10.0, 7200.0, IdleAction.STOP
    )


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("{below: 120}", "gpu_idle.below"),
        ("{after: soon}", "gpu_idle.after"),
        ("{action: kill}", "gpu_idle.action"),
        ("{after: 0s}", "over zero"),
        ("{below: 5, window: 1h}", "gpu_idle.window"),
    ],
)
def test_a_bad_gpu_idle_names_its_line_and_field(value: str, words: str) -> None:
    with pytest.raises(SpecError) as caught:
        load_policy_text(MINIMAL + f"gpu_idle: {value}\n", "policy.yaml")
    text = str(caught.value)
    assert "policy.yaml:12:" in text and words in text, text
