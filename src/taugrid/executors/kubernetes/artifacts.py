"""The artifact store of a cluster server (``ports.artifacts.ArtifactStore``).

Code snapshots stay on the server (``inner``, the store that received the uploads), and
pods fetch them from its snapshot endpoint. A run's checkpoints, outputs and metrics
live where its pods write them: the workspace's PVC, mounted in the pods at ``/tau/run``
(``manifests.plan.RUN_MOUNT``), which the server does not mount. So the workload's
paths are the pod's, and the server sees no checkpoint of its own: the attempt's SDK
then chooses the resume point in the pod, as it does locally when none is given (the
newest checkpoint whose every file verifies). Object-storage workspaces, which the server
can read, answer through their own reader.
"""

from __future__ import annotations

from taugrid.errors import NotFound
from taugrid.manifests.plan import RUN_MOUNT
from taugrid.ports.artifacts import (
    ArtifactStore,
    CheckpointInfo,
    OpenedFile,
    SnapshotUpload,
    WorkloadPaths,
)
from taugrid.ports.executor import AttemptKey


class PodArtifacts:
    def __init__(self, inner: ArtifactStore) -> None:
        self.inner = inner

    def workload_paths(self, key: AttemptKey) -> WorkloadPaths:
        return WorkloadPaths(
            checkpoint_dir=f"{RUN_MOUNT}/checkpoints",
            output_dir=f"{RUN_MOUNT}/outputs",
            metrics_file=f"{RUN_MOUNT}/attempts/{key.attempt}/metrics.jsonl",
        )

    def checkpoints(self, run_id: str, *, full: bool = False) -> list[CheckpointInfo]:
        return []

    def resume_point(
        self, run_id: str, *, fault_at: float | None = None
    ) -> tuple[CheckpointInfo | None, list[CheckpointInfo]]:
        return None, []

    def open_checkpoint_file(self, run_id: str, step: int, rel: str) -> OpenedFile:
        raise NotFound(f"run {run_id}'s checkpoints are on its workspace's volume in the cluster")

    def outputs(self, run_id: str) -> list[tuple[str, int]]:
        return []

    def open_output(self, run_id: str, rel: str) -> OpenedFile:
        raise NotFound(f"run {run_id}'s outputs are on its workspace's volume in the cluster")

    def read_metrics(self, key: AttemptKey, offset: int, limit: int) -> bytes:
        return b""

    def snapshot_exists(self, digest: str) -> bool:
        return self.inner.snapshot_exists(digest)

    def begin_snapshot(self, digest: str, declared_bytes: int | None) -> SnapshotUpload:
        return self.inner.begin_snapshot(digest, declared_bytes)

    def open_snapshot(self, digest: str) -> OpenedFile:
        return self.inner.open_snapshot(digest)

    def release_workdir(self, run_id: str) -> None:
        return None  # nothing is unpacked on the server

    def remove_run(self, run_id: str) -> bool:
        return self.inner.remove_run(run_id)
