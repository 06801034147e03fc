"""Wire shapes of /api/v1. These are also the stable ``-o json`` output of the CLI
(documented in docs/api.md); add fields, never rename or remove them."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class SubmitRequest(BaseModel):
    spec_source: str
    file_text: str | None = None
    overrides: list[str] = Field(default_factory=list)
    resolved: dict[str, Any]
    spec_hash: str | None = Field(
        None,
        description="sha256 of resolved's canonical JSON; when given it must match (the "
        "server records its own hash either way).",
    )
    snapshot_digest: str = Field(
        pattern=r"^[0-9a-f]{64}$",
        description="Uploaded for the run's workspace with PUT /snapshots/{digest}.",
    )
    submitter: str = "unknown"
    env: dict[str, str] = Field(
        default_factory=dict, description="Submitter environment (allow-listed names only)."
    )
    code: dict[str, Any] | None = Field(
        None, description='{"git": {commit, branch, dirty, diff, diff_truncated, untracked}}'
    )
    python_env: dict[str, Any] | None = Field(
        None, description="{version, implementation, executable, packages: {name: version}}"
    )
    rerun_of: str | None = None


MAX_BATCH = 1000


class BatchSubmitItem(SubmitRequest):
    idempotency_key: str | None = None


class BatchSubmitRequest(BaseModel):
    runs: list[BatchSubmitItem] = Field(min_length=1, max_length=MAX_BATCH)


class CancelRequest(BaseModel):
    runs: list[str] = Field(min_length=1, max_length=MAX_BATCH)


class EventOut(BaseModel):
    at: float
    from_state: str | None
    to_state: str
    reason: str
    message: str


class FeedEventOut(EventOut):
    """An event of the ordered feed (``GET /api/v1/events``): its id is its place."""

    id: int
    run_id: str
    workspace: str


class EventFeed(BaseModel):
    events: list[FeedEventOut]
    last_id: int  # ask for the events after this one next


class AttemptOut(BaseModel):
    attempt: int
    created_at: float
    started_at: float | None
    finished_at: float | None
    exit_code: int | None
    signal: int | None
    outcome: str | None
    placement: dict[str, Any]
    reason: str | None = None  # the stable word of how it ended (ExitCode, OOMKilled...)
    failure_class: str | None = None  # exit_code, signal, oom, preempted, hardware...
    message: str | None = None
    resumed_from: dict[str, Any] | None = None  # {"step", "path"}: its TAU_RESUME_FROM


class PendingOut(BaseModel):
    """Why a queued run is not running, as of the scheduler's last pass."""

    cluster_queue: str
    position: int
    reason: str
    message: str


class ExperimentOut(BaseModel):
    name: str | None
    group: str | None
    tags: dict[str, str]


class MetricsLast(BaseModel):
    step: int | None
    time: float
    values: dict[str, float | None]


class GpuUseOne(BaseModel):
    index: int
    utilization_pct: float
    memory_used_bytes: int
    memory_total_bytes: int


class GpuUse(BaseModel):
    """A running run's GPUs as last sampled (server/gpu_use.py)."""

    at: float
    utilization_pct: float  # the busiest GPU's
    memory_used_bytes: int
    memory_total_bytes: int
    gpus: list[GpuUseOne]
    idle_since: float | None  # every GPU under the policy's threshold since then
    flagged_idle: bool


class RunOut(BaseModel):
    id: str
    name: str
    workspace: str
    queue: str
    priority: str | None
    state: str
    reason: str
    message: str
    created_at: float
    updated_at: float
    started_at: float | None
    finished_at: float | None
    exit_code: int | None
    attempts: int
    gpus: int
    submitter: str
    spec_hash: str
    cancel_requested: bool
    pending: PendingOut | None = None  # set while QUEUED: position and reason in words
    experiment: ExperimentOut | None = None
    metrics_last: MetricsLast | None = None  # the latest value of each metric
    gpu_use: GpuUse | None = None  # a running run's GPUs as last sampled; None: not read
    restarts: int = 0  # automatic restarts used
    # Where an active run's attempt stands, as its executor sees it (a cluster run's
    # phase: queued in Kueue, scheduling, pulling the image, running); None otherwise.
    progress: str | None = None


class SpecRecord(BaseModel):
    source: str
    file_text: str | None
    overrides: list[str]
    resolved: dict[str, Any]
    hash: str
    snapshot_digest: str


class CheckpointOut(BaseModel):
    step: int
    name: str
    created_at: float
    attempt: int | None
    size: int
    file_count: int
    verified: bool
    problem: str | None


class CheckpointFile(BaseModel):
    path: str
    size: int
    sha256: str


class CheckpointDetail(CheckpointOut):
    files: list[CheckpointFile]


class CheckpointList(BaseModel):
    run_id: str
    checkpoints: list[CheckpointDetail]


class RestartPolicyOut(BaseModel):
    max: int
    on: list[str]
    backoff_s: float
    used: int
    next_at: float | None


class MetricPoint(BaseModel):
    attempt: int
    step: int | None
    time: float
    values: dict[str, float | None]


class GpuUseSample(BaseModel):
    time: float
    utilization_pct: float  # the busiest of the run's GPUs
    memory_used_bytes: int  # all of its GPUs


class MetricSeries(BaseModel):
    run_id: str
    series: list[MetricPoint]
    gpu: list[GpuUseSample] = []  # the running attempt's GPU use, the last hour or so


class RunDetail(RunOut):
    spec: SpecRecord
    env: dict[str, str]
    events: list[EventOut]
    attempt_list: list[AttemptOut]
    code: dict[str, Any] | None = None  # {"snapshot_digest", "git": {...} | None}
    python_env: dict[str, Any] | None = None
    rerun_of: str | None = None
    restart_policy: RestartPolicyOut | None = None
    checkpoints: list[CheckpointOut] = Field(default_factory=list)


class SubmitResponse(BaseModel):
    run: RunOut
    created: bool
    # E.g. an env value that looks like a credential (domain.credentials); never a value.
    warnings: list[str] = []


class BatchSubmitResponse(BaseModel):
    results: list[SubmitResponse]


class ErrorOut(BaseModel):
    code: str
    message: str


class CancelResult(BaseModel):
    ref: str
    run: RunOut | None
    error: ErrorOut | None


class CancelResponse(BaseModel):
    results: list[CancelResult]


class RunList(BaseModel):
    runs: list[RunOut]
    next_cursor: str | None


class ArtifactOut(BaseModel):
    path: str
    size: int


class ArtifactList(BaseModel):
    run_id: str
    artifacts: list[ArtifactOut]


class AttemptStatusReport(BaseModel):
    attempt_dir: str
    status: dict[str, Any]


class Health(BaseModel):
    status: str
    version: str
    runs: int | None = None


class CapabilitiesOut(BaseModel):
    """What the server's mode accepts (``taugrid.spec.modes.Capabilities``)."""

    mode: str = Field(description="local or cluster")
    max_nodes: int = Field(description="The most `nodes` a run may ask for.")
    launchers: list[str] = Field(description="The `launcher` values it starts.")
    images: bool = Field(description="Whether `image:` is honoured (else it has no effect).")


class ServerInfoOut(BaseModel):
    """``GET /api/v1/server``: the server's mode and what it accepts."""

    mode: str
    capabilities: CapabilitiesOut
    version: str


class QueueHeadOut(BaseModel):
    """One of the first runs waiting in a queue, and why (as of the scheduler's last pass)."""

    run_id: str
    workspace: str
    position: int  # in the whole queue, other workspaces' runs included
    reason: str
    message: str


class QueueOut(BaseModel):
    name: str
    cohort: str | None
    strategy: str
    local_queues: list[str]  # "workspace/queue"
    quota: dict[str, dict[str, int]]  # flavor -> resource -> nominal (gpu, cpu m, memory B)
    used: dict[str, dict[str, int]]
    borrowed: dict[str, dict[str, int]]
    pending: int
    running: int
    heads: list[QueueHeadOut] = []  # the first (at most 3) waiting runs the caller may see


class QueueList(BaseModel):
    queues: list[QueueOut]
    policy: str  # the source of the policy in force


class PolicyApply(BaseModel):
    source: str = "policy.yaml"
    text: str


class PolicyOut(BaseModel):
    source: str
    builtin: bool
    text: str | None
    hash: str | None
    applied_at: float | None
    applied_by: str | None
    flavors: list[str]
    cluster_queues: list[str]
    cohorts: list[str]
    priorities: dict[str, int]
    default_priority: str
    local_queues: list[str]


class DriftOut(BaseModel):
    object: str  # "ClusterQueue team-a", "LocalQueue team-a/main"
    kind: str
    state: str  # missing, changed, left_over
    what: str  # how it differs, in words


class PolicyClusterOut(BaseModel):
    """What applying put on the cluster (server-side apply), in apply order."""

    applied: list[str]
    counts: dict[str, int]  # kind -> objects applied
    drift_before: list[DriftOut]  # how the cluster differed before this apply


class PolicyApplyOut(PolicyOut):
    cluster: PolicyClusterOut | None  # None: local mode (no cluster to apply to)


class PolicyDriftOut(BaseModel):
    cluster: bool  # False: local mode, nothing to compare with
    source: str  # the policy in force
    hash: str | None
    drift: list[DriftOut]
