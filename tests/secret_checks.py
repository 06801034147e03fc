"""The server's submit-time secret check, for tests of secret stores: the store says which
references are missing, ``domain.secret_refs`` words the error (``RunService`` does the
same two steps)."""

from __future__ import annotations

from collections.abc import Mapping

from taugrid.domain.secret_refs import missing_secrets_error
from taugrid.ports.secrets import SecretStore


def require_secrets(
    store: SecretStore,
    workspace: str,
    user: str | None,
    refs: Mapping[str, str],
    *,
    personal: bool = False,
) -> None:
    missing = store.missing(workspace, user, refs.values())
    if err := missing_secrets_error(missing, workspace, personal=personal):
        raise err
