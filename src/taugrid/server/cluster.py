"""The cluster mode's half of the composition root (``server/app.py`` calls it): the
ports' Kubernetes adapters, built from the settings. The only server module that
imports ``taugrid.executors.kubernetes`` (import-linter keeps it so).

What a cluster server keeps of its own: the database, the code snapshots (pods fetch
them from ``GET /api/v1/snapshots/{digest}`` with a per-attempt token) and the pods'
archived logs. Everything a run does happens in the cluster; Kueue decides admission.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from taugrid.errors import UsageError
from taugrid.executors.kubernetes.admission_source import KueueAdmissionSource
from taugrid.executors.kubernetes.artifacts import PodArtifacts
from taugrid.executors.kubernetes.client import KubeClient
from taugrid.executors.kubernetes.cluster_facts import KubeClusterInspector
from taugrid.executors.kubernetes.dcgm import DcgmUsage
from taugrid.executors.kubernetes.executor import KubernetesExecutor
from taugrid.executors.kubernetes.lightkube_client import LightkubeClient
from taugrid.executors.kubernetes.logs import KubeLogSource, PodLogArchiver
from taugrid.executors.kubernetes.node_health import KubeNodeActuator
from taugrid.executors.kubernetes.policy_sync import KubePolicyTarget
from taugrid.executors.kubernetes.reported import ReportedFiles
from taugrid.executors.kubernetes.secrets import KubeSecretStore
from taugrid.executors.kubernetes.service_account import pod_namespace, pod_service_account
from taugrid.manifests.plan import (
    DEFAULT_HELPER_IMAGE,
    DEFAULT_SERVER_URL,
    RUN_MOUNT,
    ClusterTarget,
)
from taugrid.policy import load_policy_text
from taugrid.policy.models import Policy
from taugrid.policy.workspace_access import WorkspaceAccess
from taugrid.ports.artifacts import ArtifactStore
from taugrid.ports.cluster_facts import ClusterInspector
from taugrid.ports.devices import GpuUsage
from taugrid.ports.logs import LogSource
from taugrid.ports.pod_reports import PodReportSink
from taugrid.ports.policy_target import PolicyTarget
from taugrid.server.settings import ServerSettings

if TYPE_CHECKING:
    from taugrid.server.engine import RunEngine
    from taugrid.server.queueing import Queueing

log = logging.getLogger("taugrid.server")


class LocalParts(Protocol):
    """What the cluster mode takes from the local adapters: the snapshot store."""

    @property
    def artifacts(self) -> ArtifactStore: ...


@dataclass
class ClusterAdapters:
    client: KubeClient
    target: ClusterTarget
    executor: KubernetesExecutor
    admission: KueueAdmissionSource
    artifacts: ArtifactStore
    reports: PodReportSink  # what the pods' reporting sidecars send (server.pod_reports)
    secrets: KubeSecretStore
    logs: LogSource
    policy_target: PolicyTarget
    policy: _PolicyCache
    nodes: KubeNodeActuator  # the GPU health controller's hands (server/health_cluster.py)
    inspector: ClusterInspector  # what tau admin cluster check reads (cluster_check_routes)
    namespace_of: Callable[[str], str]  # a workspace's namespace
    gpu_usage: GpuUsage | None = None  # the DCGM exporter's series (--prometheus-url)

    def start(self, engine: RunEngine, queueing: Queueing) -> None:
        """Wire the adapters to the engine and list the cluster before the first pass."""
        self.policy.queueing = queueing
        self.executor.notify = engine.attempt_reported
        self.executor.admission.wake = engine.wake
        self.executor.start()
        # The informers' first lists are most of what this process will hold (a cluster's
        # worth of objects): out of the collector's way, or each full collection walks
        # them all (bench.kube_engine_pass: 28% of a pass's time at 10,000 runs).
        gc.freeze()

    def close(self) -> None:
        self.executor.close()


class _PolicyCache:
    """The policy in force as the renderers take it (parsed again only when it changes)."""

    def __init__(self) -> None:
        self.queueing: Queueing | None = None
        self._hash: str | None = None
        self._policy: Policy | None = None

    def __call__(self) -> Policy:
        assert self.queueing is not None, "ClusterAdapters.start wires the policy"
        pol = self.queueing.policy
        text = pol.text or pol.builtin_text or ""
        key = pol.hash or text
        if self._policy is None or key != self._hash:
            self._policy = load_policy_text(text, pol.source).policy
            self._hash = key
        return self._policy


def workspace_access(
    settings: ServerSettings,
    *,
    pod_account: Callable[[], str | None] = pod_service_account,
    pod_ns: Callable[[], str | None] = pod_namespace,
) -> WorkspaceAccess | None:
    """The RoleBinding each workspace namespace gets (settings.workspace_role bound to
    the server's ServiceAccount: the setting's, else the pod's own); None without a
    workspace role. UsageError when the role is set but the account cannot be found."""
    if not settings.workspace_role:
        return None
    account = settings.service_account
    if account and "/" not in account:  # a bare name: this pod's namespace
        ns = pod_ns()
        account = f"{ns}/{account}" if ns else account
    account = account or pod_account()
    if not account or "/" not in account:
        raise UsageError(
            f"TAU_WORKSPACE_CLUSTERROLE={settings.workspace_role} needs the server's "
            "ServiceAccount to bind it to: set TAU_SERVICE_ACCOUNT=namespace/name (in a pod "
            "it is read from the pod's token)"
        )
    return WorkspaceAccess.of(settings.workspace_role, account)


def make_client(settings: ServerSettings) -> KubeClient:
    if settings.kubeconfig is not None:
        return LightkubeClient.from_kubeconfig(settings.kubeconfig, settings.kube_context)
    return LightkubeClient.from_environment(settings.kube_context)


def cluster_adapters(
    settings: ServerSettings,
    local: LocalParts,
    code_key: bytes,
    workspace_of: Callable[[str], str | None],
    *,
    make_masker: Callable[[Sequence[str]], Callable[[bytes], bytes]] | None = None,
    client_factory: Callable[[ServerSettings], KubeClient] = make_client,
) -> ClusterAdapters:
    client = client_factory(settings)
    target = ClusterTarget(
        namespace_prefix=settings.namespace_prefix,
        helper_image=settings.helper_image or DEFAULT_HELPER_IMAGE,
        server_url=settings.pod_server_url or DEFAULT_SERVER_URL,
    )
    policy = _PolicyCache()

    def namespace_of(workspace: str) -> str:
        return f"{target.namespace_prefix}{workspace}"

    archiver = PodLogArchiver(client, settings.runs_dir, make_masker=make_masker)
    executor = KubernetesExecutor(
        client,
        target,
        policy,
        code_key,
        settings.home / "kubernetes",
        logs=archiver,
        positions_every_s=settings.kueue_positions_s,
    )

    artifacts = PodArtifacts(
        local.artifacts,
        ReportedFiles(settings.home / "kubernetes" / "reports", f"{RUN_MOUNT}/checkpoints"),
        client=client,
        policy=policy,
        workspace_of=workspace_of,
        namespace_of=namespace_of,
    )
    return ClusterAdapters(
        client=client,
        target=target,
        executor=executor,
        admission=executor.admission,
        artifacts=artifacts,
        reports=artifacts,
        secrets=KubeSecretStore(client, namespace_of),
        logs=KubeLogSource(settings.runs_dir),
        policy_target=KubePolicyTarget(client, target, workspace_access(settings)),
        policy=policy,
        nodes=KubeNodeActuator(client),
        inspector=KubeClusterInspector(client),
        namespace_of=namespace_of,
        gpu_usage=DcgmUsage(settings.prometheus_url) if settings.prometheus_url else None,
    )
