"""Run service: what the API does, independent of HTTP."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, Any

from pydantic import ValidationError

from taugrid.domain.access import (
    Caller,
    can_change_run,
    can_manage_workspace_secrets,
    can_read,
    can_submit,
    visible_local_queues,
    visible_workspaces,
)
from taugrid.domain.fingerprint import request_hash, spec_hash
from taugrid.domain.queue_heads import Head, queue_heads
from taugrid.domain.runid import new_run_id
from taugrid.domain.scheduling import QueueUsage, queue_usage
from taugrid.domain.secret_refs import missing_secrets_error
from taugrid.domain.states import Reason, RunState
from taugrid.domain.submit_limits import is_workspace_name
from taugrid.domain.workload_env import submitter_env
from taugrid.errors import (
    Forbidden,
    IdempotencyKeyReused,
    NotFound,
    SpecError,
    SpecProblem,
    TauError,
    UsageError,
)
from taugrid.osuser import current_user
from taugrid.ports.artifacts import ArtifactStore, CheckpointInfo, OpenedFile, SnapshotUpload
from taugrid.ports.executor import AttemptKey, Placement
from taugrid.ports.logs import LogSource
from taugrid.ports.secrets import SecretStore
from taugrid.server.engine import RunEngine
from taugrid.server.error_answers import safe_message
from taugrid.server.gpu_use import GpuUseTracker
from taugrid.server.launching import launch_request
from taugrid.server.log_follow import LogFollower
from taugrid.server.queueing import Queueing
from taugrid.server.run_files import metrics_series
from taugrid.server.schemas import SubmitRequest
from taugrid.server.snapshot_listing import Member, SnapshotListings
from taugrid.server.submission import check_idempotency_key, check_limits, checked_spec_hash
from taugrid.server.tracing import NO_TRACING, NoTracing
from taugrid.spec import TauSpec
from taugrid.spec.modes import LOCAL, Capabilities, refusal
from taugrid.spec.rerun import rerun_payload
from taugrid.store.events import EventFeed
from taugrid.store.experiments import experiment_summaries
from taugrid.store.runs import Row, RunFilter, RunStore, Transition
from taugrid.store.snapshots import SnapshotRecords

S = RunState


class RunService:
    def __init__(
        self,
        store: RunStore,
        engine: RunEngine,
        queueing: Queueing,
        *,
        secrets: SecretStore,
        artifacts: ArtifactStore,
        logs: LogSource,
        capabilities: Capabilities = LOCAL,
        gpu_use: GpuUseTracker | None = None,
        tracing: NoTracing = NO_TRACING,
    ) -> None:
        self.secrets = secrets
        self.tracing = tracing  # the submit span and the runs' paths (server/tracing.py)
        self.gpu_use = gpu_use  # the running runs' GPU use (local mode with NVML); None: none
        self.capabilities = capabilities  # what this server's mode accepts (spec/modes.py)
        # Until a request says who calls, the service acts for the machine's owner (engine,
        # tests); for_caller() gives each request its own.
        self.caller = Caller(current_user(), admin=True, auth="local")
        self.queueing = queueing
        self.store = store
        self.files = artifacts  # the artifact store: checkpoints, outputs, metrics
        self.logs = logs
        self.engine = engine
        self.snapshot_records = SnapshotRecords(store.engine)
        self.snapshot_listings = SnapshotListings()

    def for_caller(self, caller: Caller) -> RunService:
        """This service as seen by one caller: runs outside the workspaces it may read do
        not exist for it, and every change is checked against its role."""
        scoped = copy.copy(self)
        scoped.caller = caller
        return scoped

    def _resolve(self, ref: str) -> Row:
        return self.store.resolve(ref, visible_workspaces(self.caller))

    def _check_change(self, run: Row, verb: str) -> None:
        if not can_change_run(self.caller, run["workspace"], run["submitter"]):
            raise Forbidden(
                f"{self.caller.user} may not {verb} run {run['id']} "
                f"(submitted by {run['submitter']} in workspace {run['workspace']})"
            )

    # -- snapshots ----------------------------------------------------------------------
    # A digest exists for a caller only in the workspaces it was uploaded for and the
    # caller can read; anyone with the bytes may upload them for a workspace where they
    # may submit (the server hashes them again, and keeps one file).
    def has_snapshot(self, digest: str, workspace: str) -> bool:
        exists = self.files.snapshot_exists(digest)  # a malformed digest is a 400, not a "no"
        return (
            can_read(self.caller, workspace)
            and self.snapshot_records.uploaded_for(digest, workspace)
            and exists
        )

    def start_snapshot_upload(
        self, digest: str, workspace: str, declared_bytes: int | None
    ) -> SnapshotUpload:
        """Checked before a byte of the body is read: the digest, submit rights in
        ``workspace`` (a viewer 403, a non-member 404) and a declared length."""
        if not is_workspace_name(workspace):
            raise UsageError("workspace must be a workspace name (lowercase, at most 63)")
        self._check_submit(workspace)
        return self.files.begin_snapshot(digest, declared_bytes)

    def finish_snapshot_upload(self, upload: SnapshotUpload, workspace: str) -> None:
        """Verify and keep the bytes, then record the digest for ``workspace``; both are
        durable before the upload is acknowledged."""
        upload.finish()
        self.snapshot_records.record(upload.digest, workspace, self.caller.user)

    def snapshot_listing(self, ref: str) -> tuple[str, str, list[Member]]:
        """The files of a run's code snapshot with size and sha256, for a caller who may
        read the run (``tau diff``): run id, digest, members."""
        run = self._resolve(ref)
        digest = str(run["snapshot_digest"])
        if not self.files.snapshot_exists(digest):
            raise NotFound(f"the code snapshot of run {run['id']} is not on this server")

        def archive() -> IO[bytes]:
            return self.files.open_snapshot(digest).file

        return run["id"], digest, self.snapshot_listings.get(digest, archive)

    def _check_snapshot(self, digest: str, workspace: str, known: set[tuple[str, str]]) -> None:
        if (digest, workspace) in known:
            return
        if not (
            self.snapshot_records.uploaded_for(digest, workspace)
            and self.files.snapshot_exists(digest)
        ):
            raise UsageError(f"snapshot {digest[:12]} was not uploaded to workspace {workspace}")
        known.add((digest, workspace))

    # -- submit -------------------------------------------------------------------------
    def submit(self, req: SubmitRequest, idempotency_key: str | None) -> tuple[Row, bool]:
        return self.submit_many([(req, idempotency_key)])[0]

    def submit_many(
        self, items: Sequence[tuple[SubmitRequest, str | None]]
    ) -> list[tuple[Row, bool]]:
        """Validate every submission, then record them all in one transaction.

        One bad submission fails the whole batch before anything is written, with each
        problem's field path prefixed by its index (``runs[3].resources.gpus``).
        """
        many = len(items) > 1
        if self.engine.disk is not None:  # no new work onto a (nearly) full disk
            self.engine.disk.check("submission")
        rows: list[tuple[dict[str, Any], list[Transition]]] = []
        problems: list[SpecProblem] = []
        snapshots: set[tuple[str, str]] = set()  # (digest, workspace) found uploaded
        for i, (req, key) in enumerate(items):
            try:
                rows.append(self._new_run(req, key, snapshots))
            except SpecError as exc:
                problems.extend(_indexed(p, i, many) for p in exc.problems)
            except TauError as exc:
                if not many:
                    raise
                raise type(exc)(f"runs[{i}]: {exc.message}") from None
        if problems:
            raise SpecError(problems)
        try:
            results = self.store.create_runs(rows)
        except IdempotencyKeyReused as exc:
            if not many:
                raise
            raise IdempotencyKeyReused(f"runs[{exc.index}]: {exc.message}", exc.index) from None
        self.tracing.submitted(results)  # before the engine can move them
        if any(created for _, created in results):
            self.engine.runs_changed(r["id"] for r, created in results if created)
        return results

    def check(self, req: SubmitRequest) -> dict[str, Any]:
        """Every check of a submission that needs no snapshot (``POST /runs/check``): the
        CLI asks before it archives the workdir, so a missing secret or queue is told in
        milliseconds, not after seconds of archiving. Nothing is recorded; the submit
        itself checks everything again. Answers where the run would go."""
        if self.engine.disk is not None:  # no new work onto a (nearly) full disk
            self.engine.disk.check("submission")
        checked = self._checked(req)
        return {
            "workspace": checked.spec.workspace,
            "queue": checked.queue_fields["queue"],
            "cluster_queue": checked.queue_fields["cluster_queue"],
            "priority": checked.queue_fields["priority"],
        }

    def preview(self, req: SubmitRequest) -> list[dict[str, Any]]:
        """The objects the executor would create for the run's first attempt (after
        every check of the submit that needs no snapshot); nothing is recorded."""
        checked = self._checked(req)
        spec, queue_fields = checked.spec, checked.queue_fields
        row = {
            "id": checked.run_id,
            "name": spec.name or "run",
            "workspace": spec.workspace,
            "spec_resolved": resolved_with_queue(req.resolved, queue_fields["queue"]),
            "snapshot_digest": req.snapshot_digest,
            "env_summary": submitter_env(req.env),
        }
        key = AttemptKey(checked.run_id, 0)
        refs = self.secrets.workload_refs(
            spec.workspace, checked.req.submitter, spec.secrets, must_exist=False
        )
        launch = launch_request(
            row, 0, Placement(flavor=""), self.files.workload_paths(key), None, refs, None
        )
        return self.engine.executor.preview(launch)

    def _checked(self, req: SubmitRequest) -> _Checked:
        """The checks of a submission that need no snapshot, in order of cost."""
        check_limits(req)  # first: nothing oversized is looked at any further
        spec = _validate(req)
        checked_spec_hash(req)  # the client's hash, of what it sent
        self._check_submit(spec.workspace)
        if self.caller.auth != "local":  # a token says who submits, not the request body
            req = req.model_copy(update={"submitter": self.caller.user})
        _check_mode(spec, self.capabilities)
        self.engine.executor.check(req.resolved)  # what only the executor knows it refuses
        missing = self.secrets.missing(spec.workspace, req.submitter, spec.secrets.values())
        personal = not can_manage_workspace_secrets(self.caller, spec.workspace)
        if err := missing_secrets_error(missing, spec.workspace, personal=personal):
            raise err
        rerun_of = self._check_rerun_of(req.rerun_of, spec.workspace)
        run_id = new_run_id(spec.name or "run")
        queue_fields = self.queueing.admit_fields(spec, req.submitter, run_id)
        return _Checked(req, spec, rerun_of, run_id, queue_fields)

    def _new_run(
        self,
        req: SubmitRequest,
        idempotency_key: str | None,
        snapshots: set[tuple[str, str]] | None = None,
    ) -> tuple[dict[str, Any], list[Transition]]:
        check_idempotency_key(idempotency_key)
        checked = self._checked(req)
        req, spec, queue_fields = checked.req, checked.spec, checked.queue_fields
        known = set() if snapshots is None else snapshots
        self._check_snapshot(req.snapshot_digest, spec.workspace, known)
        # The record shows the queue used: a spec that names none gets the workspace's
        # default queue written in, and the run's hash is of what is recorded.
        resolved = resolved_with_queue(req.resolved, queue_fields["queue"])
        queue = queue_fields["queue"]
        row = {
            "id": checked.run_id,
            "name": spec.name or "run",
            "workspace": spec.workspace,
            "submitter": req.submitter,
            "idempotency_key": idempotency_key,
            "idempotency_owner": self.caller.user if idempotency_key else None,
            # What was asked (a retry after a policy change is still the same request).
            "request_hash": request_hash(req.resolved, req.snapshot_digest, req.rerun_of),
            "spec_source": req.spec_source,
            "spec_file_text": req.file_text,
            "spec_overrides": req.overrides,
            "spec_resolved": resolved,
            "spec_hash": spec_hash(resolved),  # the server's own hash of what it records
            "snapshot_digest": req.snapshot_digest,
            # Re-filter: the server, not the client, guarantees no secrets enter records.
            "env_summary": submitter_env(req.env),
            "gpus": spec.resources.gpus,
            "experiment_name": spec.experiment.name if spec.experiment else None,
            "experiment": spec.experiment.model_dump() if spec.experiment else None,
            "code_info": req.code,
            "python_env": req.python_env,
            "rerun_of": checked.rerun_of,
            "restarts": 0,
            **queue_fields,  # queue (the one used), cluster queue, priority, requests
        }
        return row, [
            Transition(S.PENDING, Reason.SUBMITTED, f"submitted by {req.submitter}"),
            Transition(S.QUEUED, Reason.QUEUED, f"waiting for admission in queue {queue}"),
        ]

    def _check_rerun_of(self, ref: str | None, workspace: str) -> str | None:
        """A rerun names a run of the same workspace that the caller may change, as a
        resume is checked: another workspace's run is not found, another researcher's
        run is forbidden. Answers the run's id."""
        if ref is None:
            return None
        try:
            run = self.store.resolve(ref, frozenset({workspace}))
        except NotFound:
            raise NotFound(f"rerun_of: no run of workspace {workspace} matches it") from None
        self._check_change(run, "rerun")
        return str(run["id"])

    # -- reads --------------------------------------------------------------------------
    def _check_submit(self, workspace: str) -> None:
        if can_submit(self.caller, workspace):
            return
        if can_read(self.caller, workspace):
            raise Forbidden(f"{self.caller.user} may only read workspace '{workspace}'")
        raise NotFound(f"workspace '{workspace}' does not exist")

    def get(self, ref: str) -> Row:
        return self._resolve(ref)

    def list_runs(
        self, flt: RunFilter, limit: int, cursor: str | None
    ) -> tuple[list[Row], str | None]:
        before = _parse_cursor(cursor) if cursor else None
        rows = self.store.list_runs(flt, limit=limit + 1, before=before)
        nxt = None
        if len(rows) > limit:
            rows = rows[:limit]
            nxt = f"{rows[-1]['created_at']!r}:{rows[-1]['id']}"
        return rows, nxt

    def state_counts(self) -> list[Row]:
        """Runs per (state, workspace, queue) of the workspaces the caller may see."""
        seen = visible_workspaces(self.caller)
        return [r for r in self.store.summary() if seen is None or r["workspace"] in seen]

    def experiments(self) -> list[Row]:
        return experiment_summaries(self.store.engine, visible_workspaces(self.caller))

    def rerun(self, ref: str, overrides: Sequence[str], idempotency_key: str | None) -> Row:
        """A new run from ``ref``'s record with ``overrides`` after its own, as ``tau
        rerun`` submits it (the spec resolved again from the recorded source, the recorded
        snapshot); the submit checks apply as to any submit, ``rerun_of``'s included, so
        the answer is the API's to ``POST /runs`` with ``rerun_of``."""
        run = self._resolve(ref)
        code = run["code_info"] or {}
        record = {
            "id": run["id"],
            "spec": {
                "source": run["spec_source"],
                "file_text": run["spec_file_text"],
                "overrides": run["spec_overrides"],
                "resolved": run["spec_resolved"],
                "snapshot_digest": run["snapshot_digest"],
            },
            "env": run["env_summary"],
            "code": {"git": code.get("git")} if code else None,
            "python_env": run["python_env"],
        }
        payload = rerun_payload(record, list(overrides), self.caller.user)
        made, _ = self.submit(SubmitRequest(**payload), idempotency_key)
        return made

    # -- cancel -------------------------------------------------------------------------
    def cancel(self, ref: str) -> Row:
        result = self.cancel_many([ref])[ref]
        if isinstance(result, TauError):
            raise result
        return result

    def cancel_many(self, refs: Sequence[str]) -> dict[str, Row | TauError]:
        """Cancel runs by reference, recording every cancel in one transaction.

        Runs that never started are CANCELLED at once; running ones get a durable cancel
        request that the engine carries out (SIGTERM, grace, SIGKILL).
        """
        ids: dict[str, str] = {}
        out: dict[str, Row | TauError] = {}
        admin = self.caller.platform_admin
        # An admin may cancel any run: full ids, the usual case, are found in one query.
        exact = self.store.existing_ids(refs) if admin else set()
        for ref in refs:
            if ref in exact:
                ids[ref] = ref
                continue
            try:
                run = self._resolve(ref)  # only the caller's workspaces
                if not admin:
                    self._check_change(run, "cancel")
                ids[ref] = run["id"]
            except TauError as exc:
                out[ref] = exc
        by_id = self.store.cancel_many(list(dict.fromkeys(ids.values())))
        for ref, rid in ids.items():
            out[ref] = by_id[rid]
        if any(not isinstance(r, TauError) for r in by_id.values()):
            self.engine.runs_changed(k for k, r in by_id.items() if not isinstance(r, TauError))
        return {ref: out[ref] for ref in refs}

    # -- resume -------------------------------------------------------------------------
    def resume(self, ref: str) -> Row:
        """A finished run goes back to its queue as a new attempt of the same run; the
        attempt starts from the newest checkpoint that verifies when it is launched."""
        run = self._resolve(ref)
        self._check_change(run, "resume")
        by = self.caller.user
        newest = next((c for c in self.files.checkpoints(run["id"]) if c.verified), None)
        where = (
            f"from checkpoint step {newest.step}" if newest else "from the start (no checkpoint)"
        )
        row = self.store.resume(run["id"], f"resumed by {by}; starts {where}")
        self.engine.runs_changed([run["id"]])
        return row

    # -- checkpoints and metrics ----------------------------------------------------------
    def checkpoints(self, ref: str, *, full: bool = False) -> tuple[str, list[CheckpointInfo]]:
        run = self._resolve(ref)
        return run["id"], self.files.checkpoints(run["id"], full=full)

    def open_checkpoint_file(self, ref: str, step: int, rel: str) -> OpenedFile:
        return self.files.open_checkpoint_file(self._resolve(ref)["id"], step, rel)

    def metrics(self, ref: str, attempt: int | None) -> tuple[str, list[dict[str, Any]]]:
        run = self._resolve(ref)
        if attempt is not None and not 0 <= attempt < max(run["attempt_count"], 1):
            raise NotFound(f"run {run['id']} has no attempt {attempt}")
        return run["id"], metrics_series(self.files, run["id"], run["attempt_count"], attempt)

    def gpu_series(self, run_id: str) -> list[dict[str, Any]]:
        """The running attempt's GPU use samples (``tau metrics``); [] when not read."""
        return self.gpu_use.series(run_id) if self.gpu_use is not None else []

    def gpu_now(self, run_id: str) -> dict[str, Any] | None:
        return self.gpu_use.of(run_id) if self.gpu_use is not None else None

    # -- logs and the event feed -----------------------------------------------------------
    def log_follower(self) -> LogFollower:
        """Streams a run's log (``LogFollower.stream``): an async generator that holds no
        thread while it waits."""
        return LogFollower(self.store, self.logs, self.engine.changes, self._resolve)

    def event_feed(self, after: int, limit: int) -> list[dict[str, Any]]:
        """The events after id ``after`` of the runs the caller may see, oldest first."""
        return EventFeed(self.store.engine).after(after, visible_workspaces(self.caller), limit)

    def event_feed_head(self) -> int:
        return EventFeed(self.store.engine).head()

    # -- artifacts ----------------------------------------------------------------------
    def artifacts(self, ref: str) -> tuple[str, list[dict[str, Any]]]:
        run = self._resolve(ref)
        files = [{"path": rel, "size": size} for rel, size in self.files.outputs(run["id"])]
        return run["id"], files

    def open_artifact(self, ref: str, rel: str) -> OpenedFile:
        """The artifact, opened by the store so that the workload (which may still be
        changing its outputs) cannot make the server read anything else."""
        run = self._resolve(ref)
        return self.files.open_output(run["id"], rel)


@dataclass(frozen=True)
class _Checked:
    """A submission that passed every check but the snapshot's."""

    req: SubmitRequest  # with the submitter the token names
    spec: TauSpec
    rerun_of: str | None  # the run's id
    run_id: str
    queue_fields: dict[str, Any]  # Queueing.admit_fields


def resolved_with_queue(resolved: dict[str, Any], queue: str) -> dict[str, Any]:
    """The resolved spec as recorded: ``queue`` filled in where the spec named none."""
    if resolved.get("queue") is not None:
        return resolved
    return {**resolved, "queue": queue}  # keeps the key where it was


def _validate(req: SubmitRequest) -> TauSpec:
    """The server re-validates: a client is never trusted to have done it."""
    try:
        return TauSpec.model_validate(req.resolved)
    except ValidationError as exc:
        raise SpecError(
            [
                # The message, never the value (it may be a secret): error_answers.py.
                SpecProblem(
                    req.spec_source, None, None, ".".join(map(str, e["loc"])), safe_message(e)
                )
                for e in exc.errors()
            ]
        ) from None


def _check_mode(spec: TauSpec, capabilities: Capabilities) -> None:
    """What the server's mode refuses (``nodes`` over its limit, a launcher it does not
    start): the sentences of ``spec/modes.py``, which the CLI says too."""
    refused = refusal(spec, capabilities)
    if refused is not None:
        raise UsageError(refused)


def _indexed(p: SpecProblem, i: int, many: bool) -> SpecProblem:
    if not many:
        return p
    return SpecProblem(p.file, p.line, p.col, f"runs[{i}].{p.field}", p.message)


def _parse_cursor(cursor: str) -> tuple[float, str]:
    try:
        at, rid = cursor.split(":", 1)
        return float(at), rid
    except ValueError:
        raise UsageError(f"bad cursor {cursor!r}") from None


def queue_report(
    svc: RunService,
) -> tuple[dict[str, QueueUsage], dict[str, list[str]], dict[str, list[Head]]]:
    """Usage per cluster queue from the runs in the store, its local queues and its head
    (the first runs waiting, from the scheduler's last pass), as the caller may see them:
    a platform admin everything; anyone else the cluster queues that their workspaces'
    local queues feed (with whole usage figures: the queue is shared), only their own
    workspaces' local queues, and only their own workspaces' runs in the heads."""
    pol = svc.queueing.policy.domain
    queued = [
        r for r in svc.store.in_states([S.QUEUED], light=True) if r["cluster_queue"] in pol.queues
    ]
    active = svc.store.in_states([S.ADMITTED, S.RUNNING], light=True)
    usage = queue_usage(svc.queueing.snapshot(queued, active))
    shown = visible_local_queues(svc.caller, pol.local_queues)
    if not svc.caller.platform_admin:
        fed = set(shown.values())
        usage = {name: u for name, u in usage.items() if name in fed}
    lqs: dict[str, list[str]] = {name: [] for name in usage}
    for (ws, lq), cq in sorted(shown.items()):
        lqs.setdefault(cq, []).append(f"{ws}/{lq}")
    heads = queue_heads(
        ((r["id"], r["workspace"]) for r in queued),
        svc.engine.pending,
        visible_workspaces(svc.caller),
    )
    return usage, lqs, {name: heads.get(name, []) for name in usage}
