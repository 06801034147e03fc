"""Secrets on a cluster (``ports.secrets.SecretStore``): one Kubernetes Secret per
reference in the workspace's namespace, which pods read through ``secretKeyRef``.

One Secret per reference, not one Secret with a key per reference: server-side apply
owns a map's keys per field manager, so applying one key would drop the others, and a
Secret of its own lets RBAC and audit logs speak of one secret at a time. A personal
secret is ``taugrid-u-<user>-<ref>``; a workspace's is ``taugrid-s-<ref>``; the value is
under key ``value``. Values go in and never come back out through this port: ``entries``
lists names and times only.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Callable, Iterable, Mapping

from taugrid.errors import NotFound, UsageError
from taugrid.executors.kubernetes.client import KubeClient, ObjectRef
from taugrid.executors.kubernetes.client import NotFound as NoSuchObject
from taugrid.executors.kubernetes.observe import parse_time
from taugrid.manifests.workloads import MANAGED_BY
from taugrid.ports.secrets import SecretEntry, SecretScope

VALUE_KEY = "value"
REF_LABEL = "taugrid.io/secret-ref"
OWNER_LABEL = "taugrid.io/secret-owner"
_NAME_OK = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def secret_name(ref: str, owner: str | None) -> str:
    """A DNS-1123 name for the reference (a digest suffix where the ref is not one)."""
    base = f"taugrid-u-{owner}-{ref}" if owner else f"taugrid-s-{ref}"
    clean = base.lower().replace("_", "-").replace(".", "-")
    if clean == base and _NAME_OK.fullmatch(clean) and len(clean) <= 253:
        return clean
    digest = hashlib.sha256(base.encode()).hexdigest()[:10]
    clean = re.sub(r"[^-a-z0-9]", "-", clean).strip("-")[:200]
    return f"{clean}-{digest}"


def _label_value(text: str) -> str:
    """Label values are at most 63 characters of a small alphabet: a digest otherwise."""
    if re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?", text):
        return text
    return "h-" + hashlib.sha256(text.encode()).hexdigest()[:32]


class KubeSecretStore:
    def __init__(self, client: KubeClient, namespace_of: Callable[[str], str]) -> None:
        self.client = client
        self.namespace_of = namespace_of  # workspace -> its namespace

    def set(self, scope: SecretScope, ref: str, value: str) -> None:
        labels = {**MANAGED_BY, REF_LABEL: _label_value(ref)}
        if scope.owner is not None:
            labels[OWNER_LABEL] = _label_value(scope.owner)
        self.client.apply(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {
                    "name": secret_name(ref, scope.owner),
                    "namespace": self.namespace_of(scope.workspace),
                    "labels": labels,
                    "annotations": {"taugrid.io/ref": ref},
                },
                "type": "Opaque",
                "data": {VALUE_KEY: base64.b64encode(value.encode()).decode()},
            }
        )

    def delete(self, scope: SecretScope, ref: str) -> bool:
        return self.client.delete(
            ObjectRef(
                "v1", "Secret", self.namespace_of(scope.workspace), secret_name(ref, scope.owner)
            ),
            propagation="Background",
        )

    def entries(self, scope: SecretScope) -> list[SecretEntry]:
        listed = self.client.list("v1", "Secret", self.namespace_of(scope.workspace), MANAGED_BY)
        out = []
        for obj in listed.items:
            meta = obj.get("metadata") or {}
            labels = meta.get("labels") or {}
            ref = (meta.get("annotations") or {}).get("taugrid.io/ref")
            if ref is None or REF_LABEL not in labels:
                continue
            owner = labels.get(OWNER_LABEL)
            if scope.owner is None and owner is not None:
                continue
            if scope.owner is not None and owner != _label_value(scope.owner):
                continue
            out.append(
                SecretEntry(
                    ref=ref,
                    updated_at=parse_time(meta.get("creationTimestamp")) or 0.0,
                    scope=scope.kind,
                    owner=scope.owner,
                )
            )
        return sorted(out, key=lambda e: e.ref)

    def missing(self, workspace: str, user: str | None, refs: Iterable[str]) -> list[str]:
        return [r for r in refs if self._find(workspace, user, r) is None]

    def workload_refs(
        self,
        workspace: str,
        user: str | None,
        spec_secrets: Mapping[str, str],
        *,
        must_exist: bool = True,
    ) -> dict[str, str]:
        out = {}
        for env, ref in spec_secrets.items():
            name = self._find(workspace, user, ref)
            if name is None:
                if must_exist:
                    raise NotFound(f"secret {ref!r} is not set in workspace {workspace!r}")
                name = secret_name(ref, None)  # the pod will wait for it, then fail in words
            out[env] = f"{name}/{VALUE_KEY}"
        return out

    def _find(self, workspace: str, user: str | None, ref: str) -> str | None:
        """The Secret's name for ``ref``: the user's personal one first, then the
        workspace's."""
        if not ref or "/" in ref:
            raise UsageError(f"secret reference {ref!r} is not valid")
        namespace = self.namespace_of(workspace)
        for owner in (user, None) if user else (None,):
            name = secret_name(ref, owner)
            try:
                self.client.get(ObjectRef("v1", "Secret", namespace, name))
            except NoSuchObject:
                continue
            return name
        return None
