"""Fixtures of the workload SDK's tests: a clean TAU_* environment and a checkpoint root."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def clean_tau_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in list(os.environ):
        if name.startswith("TAU_"):
            monkeypatch.delenv(name)
    yield


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty checkpoint root, also exported as $TAU_CHECKPOINT_DIR."""
    r = tmp_path / "ckpt"
    monkeypatch.setenv("TAU_CHECKPOINT_DIR", str(r))
    return r
