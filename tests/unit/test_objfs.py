"""The object storage URL rules and errors said in one line without secrets."""

from __future__ import annotations

import pytest

from taugrid.objfs import Location, StorageError, describe, endpoint_problem, url_problem

LOC = Location("s3://tau-runs/team", "http://minio:9000")


def test_urls_and_endpoints() -> None:
    assert url_problem("s3://tau-runs") is None and url_problem("s3://tau-runs/a/b/") is None
    assert url_problem("s3://tau-runs//a") is not None  # an empty part
    assert url_problem("file:///etc") is not None
    assert endpoint_problem("https://s3.example.org:8443/base") is None
    assert endpoint_problem("http://minio:9000?x=1") is not None
    assert LOC.checkpoints("train-q4m8z") == "tau-runs/team/runs/train-q4m8z/checkpoints"
    with pytest.raises(StorageError):
        LOC.outputs("../other")


def test_errors_are_one_line_and_blot_out_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret-123")
    exc = RuntimeError("signature for key AKIA-GIVEN with env-secret-123 failed\nsecond line")
    message = describe(exc, LOC, "listing", ("AKIA-GIVEN",)).message
    assert message == (
        "listing at s3://tau-runs/team (endpoint http://minio:9000): "
        "RuntimeError: signature for key *** with *** failed"
    )
    denied = describe(PermissionError("Forbidden"), LOC, "reading").message
    assert denied.endswith(
        "access denied (Forbidden): check the credentials Secret and the bucket's policy"
    )
    gone = describe(FileNotFoundError("The specified bucket does not exist"), LOC, "x").message
    assert gone.endswith(": the bucket does not exist")
    long = describe(ValueError("x" * 1000), LOC, "x").message
    assert len(long) < 300
