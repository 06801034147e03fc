"""The artifact store of a cluster server (``ports.artifacts.ArtifactStore``).

Code snapshots stay on the server (``inner``, the store that received the uploads), and
pods fetch them from its snapshot endpoint. A run's checkpoints, outputs and metrics
live where its pods write them, mounted in the pods at ``/tau/run``
(``manifests.plan.RUN_MOUNT``), which the server does not mount: the workload's paths
are the pod's. What the server knows of them it is told by each attempt's reporting
sidecar (``taugrid.podreport``, through ``server.pod_reports``) and keeps in
``ReportedFiles``: the metrics lines, read back as a local run's are, and for a
workspace's PVC the checkpoints the pod sees with its verdict after hashing each one,
from which the resume point is chosen (``TAU_RESUME_FROM``, verified again by the SDK
in the next pod before it loads). Their bytes stay on the volume: the server cannot
serve a PVC's checkpoint files or outputs.

A workspace whose ``storage.url`` is object storage is readable here: its runs'
checkpoints and outputs are answered by ``executors.objectstore`` with the SDK's own
rules, so the resume point is chosen and verified by the server exactly as on local
disk (``fetch-resume`` then brings that one checkpoint into the pod). The bucket's
credentials come from the workspace's ``credentials_secret``, read when first needed.
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Callable

from taugrid.errors import NotFound
from taugrid.executors.kubernetes.client import KubeClient, ObjectRef
from taugrid.executors.kubernetes.reported import ReportedFiles
from taugrid.executors.objectstore.reader import ObjectStoreArtifacts
from taugrid.manifests.plan import RUN_MOUNT
from taugrid.objfs import Location
from taugrid.policy.models import Policy
from taugrid.ports.artifacts import (
    ArtifactStore,
    CheckpointInfo,
    OpenedFile,
    SnapshotUpload,
    WorkloadPaths,
)
from taugrid.ports.executor import AttemptKey
from taugrid.ports.pod_reports import ReportedCheckpoint


class PodArtifacts:
    def __init__(
        self,
        inner: ArtifactStore,
        reports: ReportedFiles,
        *,
        client: KubeClient | None = None,
        policy: Callable[[], Policy] | None = None,
        workspace_of: Callable[[str], str | None] = lambda run_id: None,
        namespace_of: Callable[[str], str] = lambda workspace: workspace,
    ) -> None:
        self.inner = inner
        self.reports = reports
        self._client = client
        self._policy = policy
        self._workspace_of = workspace_of  # a run's workspace (the store)
        self._namespace_of = namespace_of
        self._lock = threading.Lock()
        self._readers: dict[tuple[str, str | None, str | None, str], ObjectStoreArtifacts] = {}

    def workload_paths(self, key: AttemptKey) -> WorkloadPaths:
        return WorkloadPaths(
            checkpoint_dir=f"{RUN_MOUNT}/checkpoints",
            output_dir=f"{RUN_MOUNT}/outputs",
            metrics_file=f"{RUN_MOUNT}/attempts/{key.attempt}/metrics.jsonl",
        )

    def checkpoints(self, run_id: str, *, full: bool = False) -> list[CheckpointInfo]:
        reader = self._reader(run_id)
        return reader.checkpoints(run_id, full=full) if reader else self.reports.checkpoints(run_id)

    def resume_point(
        self, run_id: str, *, fault_at: float | None = None
    ) -> tuple[CheckpointInfo | None, list[CheckpointInfo]]:
        reader = self._reader(run_id)
        if reader is not None:
            return reader.resume_point(run_id, fault_at=fault_at)
        return self.reports.resume_point(run_id, fault_at=fault_at)

    def open_checkpoint_file(self, run_id: str, step: int, rel: str) -> OpenedFile:
        reader = self._reader(run_id)
        if reader is None:
            raise NotFound(
                f"run {run_id}'s checkpoints are on its workspace's volume in the cluster"
            )
        return reader.open_checkpoint_file(run_id, step, rel)

    def outputs(self, run_id: str) -> list[tuple[str, int]]:
        reader = self._reader(run_id)
        return reader.outputs(run_id) if reader else []

    def open_output(self, run_id: str, rel: str) -> OpenedFile:
        reader = self._reader(run_id)
        if reader is None:
            raise NotFound(f"run {run_id}'s outputs are on its workspace's volume in the cluster")
        return reader.open_output(run_id, rel)

    def read_metrics(self, key: AttemptKey, offset: int, limit: int) -> bytes:
        return self.reports.read_metrics(key, offset, limit)

    # -- what the pods report (ports.pod_reports.PodReportSink) ---------------------------
    def append_metrics(self, key: AttemptKey, offset: int, data: bytes) -> int:
        return self.reports.append_metrics(key, offset, data)

    def put_checkpoints(self, key: AttemptKey, entries: list[ReportedCheckpoint]) -> None:
        self.reports.put_checkpoints(key, entries)

    def _reader(self, run_id: str) -> ObjectStoreArtifacts | None:
        """The object-storage reader of the run's workspace; None for a PVC (or none)."""
        if self._policy is None:
            return None
        workspace = self._workspace_of(run_id)
        if workspace is None:
            return None
        ws = next((w for w in self._policy().workspaces if w.name == workspace), None)
        storage = ws.storage if ws is not None else None
        if storage is None or storage.url is None:
            return None
        cache_key = (storage.url, storage.endpoint_url, storage.credentials_secret, workspace)
        with self._lock:
            reader = self._readers.get(cache_key)
        if reader is None:
            key, secret = self._credentials(workspace, storage.credentials_secret)
            reader = ObjectStoreArtifacts(
                Location(storage.url, storage.endpoint_url), key=key, secret=secret
            )
            with self._lock:
                self._readers[cache_key] = reader
        return reader

    def _credentials(self, workspace: str, name: str | None) -> tuple[str | None, str | None]:
        """The bucket's keys from the workspace's Secret (never logged, never stored)."""
        if name is None or self._client is None:
            return None, None
        obj = self._client.get(ObjectRef("v1", "Secret", self._namespace_of(workspace), name))
        data = obj.get("data") or {}

        def value(k: str) -> str | None:
            raw = data.get(k)
            return base64.b64decode(raw).decode() if raw else None

        return value("AWS_ACCESS_KEY_ID"), value("AWS_SECRET_ACCESS_KEY")

    def snapshot_exists(self, digest: str) -> bool:
        return self.inner.snapshot_exists(digest)

    def begin_snapshot(self, digest: str, declared_bytes: int | None) -> SnapshotUpload:
        return self.inner.begin_snapshot(digest, declared_bytes)

    def open_snapshot(self, digest: str) -> OpenedFile:
        return self.inner.open_snapshot(digest)

    def release_workdir(self, run_id: str) -> None:
        return None  # nothing is unpacked on the server

    def remove_run(self, run_id: str) -> bool:
        reported = self.reports.remove_run(run_id)
        return self.inner.remove_run(run_id) or reported
