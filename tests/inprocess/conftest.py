"""Fixtures of the in-process engine tests (the world itself: ``engine_world.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from engine_world import World, make_world


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = make_world(tmp_path)
    yield w
    w.store.engine.dispose()
