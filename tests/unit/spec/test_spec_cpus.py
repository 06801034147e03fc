"""`resources.cpus`: a number of cores or a Kubernetes CPU quantity, exactly the spellings
a policy's `cpu` quota takes (one parser), counted in millicores."""

from __future__ import annotations

from pathlib import Path

import pytest

from taugrid.errors import SpecError
from taugrid.policy.models import CpuQuota
from taugrid.policy.quantities import cpu_millis
from taugrid.spec import load_spec
from taugrid.spec.models import TauSpec


def _load(tmp_path: Path, cpus: str) -> TauSpec:
    (tmp_path / "tau.yaml").write_text(f"command: x\nresources: {{cpus: {cpus}}}\n")
    return load_spec(tmp_path / "tau.yaml").spec


@pytest.mark.parametrize(
    ("written", "stored", "millis"),
    [("500m", "500m", 500), ("'2'", "2", 2000), ("1.5", 1.5, 1500), ("4", 4.0, 4000),
     ("0.1", 0.1, 100), ("'1e3'", "1e3", 1_000_000), ("2k", "2k", 2_000_000)],
)  # fmt: skip
def test_numbers_and_quantities_are_kept_as_written_and_counted_in_millicores(
    tmp_path: Path, written: str, stored: object, millis: int
) -> None:
    spec = _load(tmp_path, written)
    assert spec.resources.cpus == stored and type(spec.resources.cpus) is type(stored)
    assert spec.resources.cpus_millis == millis
    # The policy reads the same text as the same amount.
    quota = CpuQuota(nominal=stored if isinstance(stored, str) else repr(stored))
    assert cpu_millis(quota.nominal) == millis


@pytest.mark.parametrize(
    ("written", "message"),
    [
        ("0", "must be more than zero"),
        ("'0m'", "must be more than zero"),
        ("-1", "must not be negative"),
        ("fast", "'fast' is not CPU cores such as 4, 0.5 or \"500m\" (millicores)"),
        ("true", "got a boolean"),
        ("[1]", "got a list"),
        (".inf", "must be CPU cores"),
    ],
)
def test_what_is_no_cpu_amount_is_refused_with_the_reason(
    tmp_path: Path, written: str, message: str
) -> None:
    with pytest.raises(SpecError) as err:
        _load(tmp_path, written)
    assert message in err.value.message, err.value.message


def test_no_cpus_requests_none() -> None:
    assert TauSpec.model_validate({"command": "x"}).resources.cpus_millis is None
