"""Table definitions. Migrations in ``migrations/versions`` must produce exactly this
schema; a test compares the two with Alembic's autogenerate."""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)

metadata = MetaData()

runs = Table(
    "runs",
    metadata,
    Column("id", String(63), primary_key=True),
    Column("name", String(63), nullable=False),
    Column("workspace", String(63), nullable=False),
    Column("queue", String(63), nullable=False),
    Column("priority", String(63), nullable=True),
    Column("state", String(16), nullable=False),
    Column("reason", String(32), nullable=False),
    Column("message", Text, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("started_at", Float, nullable=True),
    Column("finished_at", Float, nullable=True),
    Column("exit_code", Integer, nullable=True),
    Column("submitter", String(255), nullable=False),
    # Idempotency (migration 0005): a key is scoped to who sent it and the workspace, and
    # bound to a hash of the request (domain.fingerprint.request_hash).
    Column("idempotency_key", String(128), nullable=True),
    Column("idempotency_owner", String(255), nullable=True),
    Column("request_hash", String(64), nullable=True),
    Column("spec_source", Text, nullable=False),
    Column("spec_file_text", Text, nullable=True),
    Column("spec_overrides", JSON, nullable=False),
    Column("spec_resolved", JSON, nullable=False),
    Column("spec_hash", String(64), nullable=False),
    Column("snapshot_digest", String(64), nullable=False),
    Column("env_summary", JSON, nullable=False),
    Column("gpus", Integer, nullable=False),
    Column("queued_seq", Integer, nullable=False),
    Column("attempt_count", Integer, nullable=False),
    Column("cancel_requested_at", Float, nullable=True),
    # Queueing (migration 0002): what the scheduler needs to rebuild its view after a restart.
    Column("cluster_queue", String(63), nullable=True),
    Column("priority_value", Integer, nullable=False, server_default="0"),
    Column("requests", JSON, nullable=True),  # {"gpu": n, "cpu": millicores, "memory": bytes}
    Column("gpu_type", String(63), nullable=True),
    Column("flavor", String(63), nullable=True),  # assigned on admission
    # A stop the control plane asked for (migration 0006): preemption, hardware fault,
    # drain or eviction (domain.stops); a person's cancel is cancel_requested_at.
    Column("stop_requested_at", Float, nullable=True),
    # Records (DESIGN.md 3.7) and automatic restarts.
    Column("experiment_name", String(253), nullable=True),
    Column("experiment", JSON, nullable=True),  # {"name", "group", "tags"}
    Column("code_info", JSON, nullable=True),  # {"git": {...}} captured at submit
    Column("python_env", JSON, nullable=True),  # {"version", "packages", ...}
    Column("rerun_of", String(63), nullable=True),
    Column("metrics_last", JSON, nullable=True),  # {"step", "time", "values"}
    Column("restarts", Integer, nullable=False, server_default="0"),
    Column("next_attempt_at", Float, nullable=True),  # while RESTARTING: when to requeue
    Column("stop_reason", String(16), nullable=True),  # domain.stops.StopReason
    Column("stop_message", Text, nullable=True),
    Column("stop_fault_at", Float, nullable=True),  # a hardware stop: when the fault happened
    Index("ix_runs_created_at", "created_at"),
    Index("ix_runs_name_created", "name", "created_at"),
    Index("ix_runs_state", "state"),
    Index("ix_runs_queued_seq", "queued_seq"),
    Index("ix_runs_experiment", "experiment_name", "created_at"),
    Index("ux_runs_idempotency", "idempotency_owner", "workspace", "idempotency_key", unique=True),
)

# Which workspaces a code snapshot was uploaded for (migration 0005): a digest exists for
# a caller only in these, so existence does not leak across workspaces.
snapshot_workspaces = Table(
    "snapshot_workspaces",
    metadata,
    Column("digest", String(64), primary_key=True),
    Column("workspace", String(63), primary_key=True),
    Column("uploaded_by", String(255), nullable=False),
    Column("uploaded_at", Float, nullable=False),
)

events = Table(
    "events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", String(63), ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    Column("at", Float, nullable=False),
    Column("from_state", String(16), nullable=True),
    Column("to_state", String(16), nullable=False),
    Column("reason", String(32), nullable=False),
    Column("message", Text, nullable=False),
    Index("ix_events_run_id", "run_id", "id"),
)

attempts = Table(
    "attempts",
    metadata,
    Column("run_id", String(63), ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    Column("attempt", Integer, primary_key=True),
    Column("created_at", Float, nullable=False),
    Column("started_at", Float, nullable=True),
    Column("finished_at", Float, nullable=True),
    Column("exit_code", Integer, nullable=True),
    Column("signal", Integer, nullable=True),
    Column("outcome", String(16), nullable=True),
    Column("placement", JSON, nullable=False),
    Column("attempt_dir", Text, nullable=False),
    Column("reason", String(32), nullable=True),  # the stable word of how it ended
    Column("failure_class", String(16), nullable=True),
    Column("message", Text, nullable=True),
    Column("resumed_from", JSON, nullable=True),  # {"step", "path"} given as TAU_RESUME_FROM
    Column("stop_reason", String(16), nullable=True),  # how it was stopped (migration 0006)
    Column("fault_at", Float, nullable=True),  # a hardware stop: checkpoints after it are skipped
)

policies = Table(
    "policies",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("source", Text, nullable=False),
    Column("text", Text, nullable=False),
    Column("hash", String(64), nullable=False),
    Column("applied_at", Float, nullable=False),
    Column("applied_by", String(255), nullable=False),
)

# -- identity and access (migration 0004) --------------------------------------------------
users = Table(
    "users",
    metadata,
    Column("name", String(63), primary_key=True),
    Column("kind", String(16), nullable=False),  # user | service
    Column("admin", Boolean, nullable=False),
    Column("disabled", Boolean, nullable=False),
    Column("created_at", Float, nullable=False),
)

tokens = Table(
    "tokens",
    metadata,
    Column("id", String(16), primary_key=True),  # the public part of "tau_<id>_<secret>"
    Column("user", String(63), ForeignKey("users.name"), nullable=False),
    Column("name", String(63), nullable=True),
    Column("salt", String(32), nullable=False),
    Column("hash", String(64), nullable=False),  # sha256(salt + secret): never the secret
    Column("created_at", Float, nullable=False),
    Column("expires_at", Float, nullable=True),
    Column("revoked_at", Float, nullable=True),
    Column("last_used_at", Float, nullable=True),
    Index("ix_tokens_user", "user"),
)

workspaces = Table(
    "workspaces",
    metadata,
    Column("name", String(63), primary_key=True),
    Column("created_at", Float, nullable=False),
)

memberships = Table(
    "memberships",
    metadata,
    Column(
        "workspace",
        String(63),
        ForeignKey("workspaces.name", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("user", String(63), ForeignKey("users.name"), primary_key=True),
    Column("role", String(16), nullable=False),
)

audit = Table(
    "audit",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("at", Float, nullable=False),
    Column("actor", String(63), nullable=False),
    Column("action", String(63), nullable=False),
    Column("target", Text, nullable=True),
    Column("workspace", String(63), nullable=True),
    Column("source", String(255), nullable=True),  # the client's address
    Column("outcome", String(32), nullable=False),  # ok | denied | an error code
    Column("detail", Text, nullable=True),
    Index("ix_audit_at", "at"),
)

# GPU health (migration 0007): what is out of service and why, and every health event
# with what was done about it (the audit trail of the monitor: one row per decision).
gpu_health = Table(
    "gpu_health",
    metadata,
    Column("gpu", String(128), primary_key=True),  # the GPU's UUID
    Column("node", String(253), nullable=False),  # "local" on one machine
    Column("gpu_index", Integer, nullable=True),
    Column("level", Integer, nullable=False),  # the worst level seen (0-5)
    Column("state", String(16), nullable=False),  # quarantined | returned
    Column("reason", Text, nullable=False),
    Column("fault_at", Float, nullable=False),  # the first fault: later checkpoints suspect
    Column("updated_at", Float, nullable=False),
    Column("updated_by", String(63), nullable=False),  # the monitor, or who returned it
)

health_events = Table(
    "health_events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("at", Float, nullable=False),  # when the fault was observed
    Column("recorded_at", Float, nullable=False),
    Column("node", String(253), nullable=False),
    Column("gpu", String(128), nullable=True),
    Column("gpu_index", Integer, nullable=True),
    Column("source", String(32), nullable=False),  # nvml-event | nvml-poll | kmsg | scripted...
    Column("kind", String(32), nullable=False),  # xid | ecc_dbe | ... | returned
    Column("xid", Integer, nullable=True),
    Column("level", Integer, nullable=False),
    Column("action", String(32), nullable=False),  # what the level calls for
    Column("outcome", String(16), nullable=False),  # applied | shadow | duplicate | breaker
    Column("reason", Text, nullable=False),
    Column("runs", JSON, nullable=True),  # the run ids stopped for it
    Index("ix_health_events_at", "at"),
)
