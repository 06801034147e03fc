"""The fixtures the tests of deploy/helm share (test_chart_*.py); their logic is in
chartkit.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from chartkit import chart_to_render, find_helm


@pytest.fixture(scope="session")
def helm() -> str:
    """The Helm 4 binary (.venv/bin/helm, or helm on PATH)."""
    return find_helm()


@pytest.fixture(scope="session")
def chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The chart to render: deploy/helm/taugrid itself, or, while the files its links
    point at are missing (Helm refuses a chart with a dangling link), a copy with
    placeholders there, so that everything else is still checked."""
    return chart_to_render(tmp_path_factory)
