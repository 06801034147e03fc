"""The secret store port: secrets of a workspace (or of one user in it), and how a
workload gets them without the value ever passing through a record, a log or a launch
request.

Contract: values are written and never read back through this port (only the workload
receives them, by the executor's means); ``workload_refs`` raises ``NotFound`` for a
reference that resolves to nothing unless ``must_exist`` is false.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class SecretScope:
    """Whose secrets: a workspace's (``owner`` None) or one user's personal ones in it."""

    workspace: str
    owner: str | None = None

    @property
    def kind(self) -> str:
        return "workspace" if self.owner is None else "personal"

    def __str__(self) -> str:
        if self.owner is None:
            return f"workspace {self.workspace!r}"
        return f"{self.owner}'s personal secrets in workspace {self.workspace!r}"


@dataclass(frozen=True)
class SecretEntry:
    """What may be shown about a secret: its reference, scope and when it was last set."""

    ref: str
    updated_at: float
    scope: str = "workspace"  # workspace | personal
    owner: str | None = None


class SecretStore(Protocol):
    def set(self, scope: SecretScope, ref: str, value: str) -> None: ...

    def delete(self, scope: SecretScope, ref: str) -> bool: ...

    def entries(self, scope: SecretScope) -> list[SecretEntry]: ...

    def missing(self, workspace: str, user: str | None, refs: Iterable[str]) -> list[str]:
        """The references that resolve to nothing for a run of ``workspace`` by ``user``
        (the user's personal secrets first, then the workspace's)."""
        ...

    def workload_refs(
        self,
        workspace: str,
        user: str | None,
        spec_secrets: Mapping[str, str],
        *,
        must_exist: bool = True,
    ) -> dict[str, str]:
        """env name -> how the executor hands the value to the workload."""
        ...
