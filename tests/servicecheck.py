"""Skip a test whose service or package is missing, with the reason; in CI
(TAU_REQUIRE_SERVICES=1) fail instead, so nothing is skipped silently there.

A module of its own (tests/ is on sys.path through its conftest) so every test
directory imports the one helper."""

from __future__ import annotations

import importlib.util
import os
import shutil
import stat
from pathlib import Path

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


def require_checkout_readable_by_run_uids() -> None:
    """A sandboxed workload that runs the test's Python imports taugrid from this
    checkout, which the sandbox must leave in view (docs/isolation.md): a checkout under
    a scratch directory (/tmp, /var/tmp, /dev/shm) is behind the sandbox's own empty
    tmpfs there, and as root, where each run gets a uid of its own, one under a 0700
    home (/root) is out of that uid's reach. Either is skipped with the reason, never in
    CI, whose checkout is in view."""
    import taugrid
    from taugrid.executors.local.sandbox import SCRATCH_DIRS

    # The interpreter is bound into the sandbox read-only; the checkout is not.
    code = Path(taugrid.__file__).resolve()
    hidden = [d for d in SCRATCH_DIRS if code.is_relative_to(Path(d).resolve())]
    require_service(
        not hidden,
        f"a sandboxed run cannot see this checkout's code under {', '.join(hidden)} "
        "(the sandbox puts an empty tmpfs there); clone it elsewhere",
    )
    if os.geteuid() != 0:
        return
    blocked = [str(p) for p in code.parents if not p.stat().st_mode & stat.S_IXOTH]
    require_service(
        not blocked,
        "a sandboxed run's own uid cannot reach this checkout's code "
        f"(no search permission for others on {', '.join(sorted(set(blocked)))}); "
        "clone it where other users can read it",
    )
