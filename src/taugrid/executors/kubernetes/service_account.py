"""The ServiceAccount this pod runs as, read from its mounted token (``namespace/name``):
whom the workspace RoleBindings bind when ``TAU_SERVICE_ACCOUNT`` does not say.

A projected ServiceAccount token is a JWT whose subject is
``system:serviceaccount:<namespace>:<name>``; only its claims are read (no signature is
checked: the API server does that, and nothing here trusts the name for access). The
namespace file beside it completes a bare ``TAU_SERVICE_ACCOUNT`` name.
"""

from __future__ import annotations

import base64
import binascii
import json
from pathlib import Path

# Where the kubelet mounts a pod's ServiceAccount (lightkube's SERVICE_ACCOUNT; written
# out so this module needs no client library).
SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
SUBJECT_PREFIX = "system:serviceaccount:"


def pod_namespace(directory: str | Path = SERVICE_ACCOUNT) -> str | None:
    """The pod's namespace (the mounted ``namespace`` file), or None outside a pod."""
    try:
        text = Path(directory, "namespace").read_text().strip()
    except OSError:
        return None
    return text or None


def pod_service_account(directory: str | Path = SERVICE_ACCOUNT) -> str | None:
    """``namespace/name`` of the pod's ServiceAccount from its token, or None (outside a
    pod, or a token that is no ServiceAccount JWT)."""
    try:
        token = Path(directory, "token").read_text().strip()
    except OSError:
        return None
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        payload = base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4))
        claims = json.loads(payload)
    except (binascii.Error, ValueError):
        return None
    subject = claims.get("sub") if isinstance(claims, dict) else None
    if not isinstance(subject, str) or not subject.startswith(SUBJECT_PREFIX):
        return None
    namespace, sep, name = subject[len(SUBJECT_PREFIX) :].partition(":")
    return f"{namespace}/{name}" if sep and namespace and name else None
