"""Secret references, workspace names and secret values: what is valid, in words that
never repeat what the user typed (it may be the value). Pure.

A spec's ``secrets: {HF_TOKEN: hf/token}`` names a secret by *reference*: ``/``-separated
segments of ``[A-Za-z0-9_.-]``, at most 253 characters, no ``..``. The CLI checks what it
is given before it sends anything; the server checks again; every secret store (the local
one in ``executors/local/secrets.py``, a Kubernetes Secret later) holds values under these
references only.
"""

from __future__ import annotations

import re

from taugrid.domain.credentials import credential_shape
from taugrid.errors import UsageError

MAX_REF_LEN = 253
MAX_VALUE_BYTES = 64 * 1024
DEFAULT_WORKSPACE = "default"

_SEGMENT = r"[A-Za-z0-9_.-]+"
_REF = re.compile(rf"{_SEGMENT}(?:/{_SEGMENT})*")
# Workspace names are DNS names (they become Kubernetes namespaces and labels).
_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_WORKSPACE = re.compile(rf"{_LABEL}(\.{_LABEL})*")
_WORKSPACE_MAX = 253


def check_ref(ref: str) -> str:
    """``ref`` if it is a valid secret reference, else :class:`UsageError`.

    The message says what is wrong without repeating the text: a user who typed the
    value where the reference goes must not see it printed back.
    """
    problem = ref_problem(ref)
    if problem is not None:
        raise UsageError(f"invalid secret reference: {problem}")
    return ref


def ref_problem(ref: object) -> str | None:
    """What is wrong with ``ref`` as a secret reference, or None."""
    if not isinstance(ref, str) or not ref:
        return "must be a non-empty string"
    if len(ref) > MAX_REF_LEN:
        return f"at most {MAX_REF_LEN} characters"
    if ref.startswith("/"):
        return "must not start with '/'"
    if ".." in ref:
        return "must not contain '..'"
    if not _REF.fullmatch(ref):
        return "use segments of letters, digits, '_', '.', '-' separated by '/' (e.g. hf/token)"
    if "." in ref.split("/"):
        return "a segment cannot be '.'"
    return None


def refuse_value_as_ref(ref: str) -> None:
    """:class:`UsageError` when a new secret's reference looks like a credential: the
    value typed where the name goes would be shown by every listing and audit entry."""
    shape = credential_shape(ref)
    if shape is not None:
        raise UsageError(
            f"the secret reference looks like {shape}, not a name; give a name as REF "
            "(e.g. hf/token) and the value on stdin or at the prompt"
        )


def check_workspace(workspace: object) -> str:
    """``workspace`` if it is a valid workspace name (a DNS label), else :class:`UsageError`."""
    if (
        not isinstance(workspace, str)
        or len(workspace) > _WORKSPACE_MAX
        or not _WORKSPACE.fullmatch(workspace)
    ):
        raise UsageError(
            "invalid workspace name: lowercase letters, digits, '-' and '.', starting and "
            f"ending with a letter or digit, at most {_WORKSPACE_MAX} characters"
        )
    return workspace


def check_value(value: object) -> str:
    """``value`` if it can be stored and put in an environment, else :class:`UsageError`.

    The messages describe the problem, never the value.
    """
    if not isinstance(value, str):
        raise UsageError("a secret value must be a string")
    if not value:
        raise UsageError("a secret value cannot be empty")
    if "\0" in value:
        raise UsageError("a secret value cannot contain a NUL character")
    if len(value.encode("utf-8", "surrogateescape")) > MAX_VALUE_BYTES:
        raise UsageError(f"a secret value is at most {MAX_VALUE_BYTES // 1024} KiB")
    return value


def set_command(ref: str, workspace: str, *, personal: bool = False) -> str:
    return f"tau secret set {ref} --workspace {workspace}" + (" --personal" if personal else "")


def not_set_message(ref: str, workspace: str, *, personal: bool = False) -> str:
    return (
        f"secret {ref!r} is not set in workspace {workspace!r}; set it with: "
        f"{set_command(ref, workspace, personal=personal)}"
    )


def missing_secrets_error(
    missing: list[str], workspace: str, *, personal: bool = False
) -> UsageError | None:
    """The submit-time error naming every reference that resolves to nothing for a run of
    ``workspace``, with the commands that set them (``--personal`` ones when
    ``personal``: the submitter may not set workspace secrets); None when none is."""
    if not missing:
        return None
    if len(missing) == 1:
        return UsageError(not_set_message(missing[0], workspace, personal=personal))
    commands = "; ".join(set_command(ref, workspace, personal=personal) for ref in missing)
    names = ", ".join(repr(ref) for ref in missing)
    return UsageError(
        f"secrets {names} are not set in workspace {workspace!r}; set them with: {commands}"
    )
