"""Skip a test whose service or package is missing, with the reason; in CI
(TAU_REQUIRE_SERVICES=1) fail instead, so nothing is skipped silently there.

A module of its own (tests/ is on sys.path through its conftest) so every test
directory imports the one helper."""

from __future__ import annotations

import importlib.util
import os
import shutil

import pytest


def require_service(available: bool, why: str) -> None:
    if available:
        return
    if os.environ.get("TAU_REQUIRE_SERVICES") == "1":
        pytest.fail(f"required service missing in CI: {why}")
    pytest.skip(why)


def require_module(name: str, why: str) -> None:
    require_service(importlib.util.find_spec(name) is not None, why)


SANDBOX = "bubblewrap (bwrap) is needed for a shared server's sandbox"


def require_bwrap(why: str = SANDBOX) -> None:
    require_service(shutil.which("bwrap") is not None, why)
