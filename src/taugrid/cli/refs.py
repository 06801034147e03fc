"""``--workspace`` on commands that name runs: look the run up in that workspace only.

A run id is unique everywhere, but names and id prefixes are not: ``tau logs train
--workspace vision`` means the latest run named ``train`` in ``vision``. Without the
option the server looks among every workspace the caller may read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from taugrid.cli.client import Client
from taugrid.errors import NotFound

F = TypeVar("F", bound=Callable[..., Any])


def workspace_option(func: F) -> F:
    option = click.option(
        "--workspace", help="Look the run up in this workspace only (names and prefixes)."
    )
    return option(func)


def in_workspace(client: Client, ref: str, workspace: str | None) -> str:
    """The id of the run ``ref`` names in ``workspace`` (``ref`` itself without one)."""
    if workspace is None:
        return ref
    named = client.list_runs(name=ref, workspace=workspace, limit=1)["runs"]
    if named:
        return str(named[0]["id"])
    run = client.get_run(ref)  # a full id or a unique prefix
    if run["workspace"] != workspace:
        raise NotFound(f"no run matches '{ref}' in workspace '{workspace}'")
    return str(run["id"])
