"""From a run (its spec, its identity, the policy in force) to the objects one attempt
creates on a cluster. Pure: ``tau render`` calls it with no server, the Kubernetes
executor with what the engine decided, and both get the same objects.

What the policy decides here, as Kueue would see it:
- the namespace is the workspace's (``namespace_prefix + workspace``), the LocalQueue
  the spec's ``queue`` or the workspace's default, the WorkloadPriorityClass the spec's
  ``priority`` or the policy's default; unknown ones are refused naming the valid ones;
- a ``resources.gpu_type`` narrows the cluster queue's flavors to those of that type,
  and ``resources.gpus`` to those whose nodes have that many GPUs
  (``gpus_per_node``); none left is refused before anything is created. When that
  narrowed the choice, the pods get a required node affinity for the remaining flavors'
  node labels (Kueue then assigns only those) and tolerations for the taints of those
  that do not tolerate their own;
- checkpoints and outputs go on the workspace's PVC (``storage.pvc``), in the run's own
  directory, or in object storage (``storage.url``: an emptyDir in the pod, filled from
  the bucket before the workload starts and uploaded by a sidecar as checkpoints are
  committed); without either they live in the pod, and a restart starts fresh.

The pod's environment is the workload environment of DESIGN.md 3.3 with the paths
inside the pod. ``CUDA_VISIBLE_DEVICES`` is left to the device plugin (the container
sees only its own GPUs), and nothing of the submitter's shell is copied: the image's
PATH and Python are the ones that count.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from taugrid import __version__
from taugrid.domain.runid import SUFFIX_LEN
from taugrid.domain.workload_env import WorkloadContext, workload_env
from taugrid.errors import UsageError
from taugrid.manifests.workloads import (
    MANAGED_BY,
    CodeFetch,
    JobInput,
    ObjectSync,
    PodReport,
    RunStorage,
    SecretRef,
    job_name,
    labels,
    render_indexed_job,
    render_job,
    render_rayjob,
)
from taugrid.policy.kueue import namespace_for
from taugrid.policy.models import Flavor, Policy, Storage, Workspace
from taugrid.spec.models import TauSpec

DEFAULT_HELPER_IMAGE = f"ghcr.io/taugrid/taugrid:{__version__}"
DEFAULT_SERVER_URL = "http://taugrid.taugrid-system.svc:8000"
WORKDIR = "/workspace"  # the snapshot's place in the pod
RUN_MOUNT = "/tau/run"
WORKSPACE_SECRET = "taugrid-secrets"  # the workspace's secrets: one key per reference
TOKEN_PLACEHOLDER = "(issued at launch)"
_SECRET_KEY = re.compile(r"[-._a-zA-Z0-9]+")


@dataclass(frozen=True)
class ClusterTarget:
    """The cluster-wide settings of a server in cluster mode."""

    namespace_prefix: str = ""
    helper_image: str = DEFAULT_HELPER_IMAGE  # the code-fetching init container's image
    server_url: str = DEFAULT_SERVER_URL  # where pods fetch code snapshots from


@dataclass(frozen=True)
class AttemptIdentity:
    """What the server decided about one attempt."""

    run_id: str
    attempt: int
    snapshot_digest: str
    resume_from: str | None = None  # a checkpoint directory name (step-...), or None


@dataclass(frozen=True)
class ClusterPlacement:
    """Where the policy sends the run: namespace, queue, priority, flavor constraints."""

    namespace: str
    queue: str
    priority: str
    node_affinity: tuple[Mapping[str, str], ...]
    tolerations: tuple[Mapping[str, str], ...]
    storage_claim: str | None
    storage: Storage | None = None  # the workspace's, for its object storage URL


def place(spec: TauSpec, policy: Policy, target: ClusterTarget) -> ClusterPlacement:
    """The policy's answer for ``spec``, or a UsageError saying what to change."""
    ws = _workspace(policy, spec.workspace)
    queues = {lq.name: lq.cluster_queue for lq in ws.local_queues}
    queue = spec.queue or ws.default_local_queue
    if queue not in queues:
        raise UsageError(
            f"queue '{queue}' does not exist in workspace '{ws.name}'; queues: "
            f"{', '.join(sorted(queues))}"
        )
    priorities = [p.name for p in policy.priority_classes]
    priority = spec.priority or policy.default_priority.name
    if priority not in priorities:
        raise UsageError(
            f"priority '{priority}' does not exist; priorities: {', '.join(priorities)}"
        )
    affinity, tolerations = _flavor_constraints(spec, policy, queues[queue])
    return ClusterPlacement(
        namespace=namespace_for(ws.name, target.namespace_prefix),
        queue=queue,
        priority=priority,
        node_affinity=affinity,
        tolerations=tolerations,
        storage_claim=ws.storage.pvc if ws.storage is not None else None,
        storage=ws.storage,
    )


def _workspace(policy: Policy, name: str) -> Workspace:
    for ws in policy.workspaces:
        if ws.name == name:
            return ws
    raise UsageError(
        f"workspace '{name}' is not in the policy; workspaces: "
        f"{', '.join(w.name for w in policy.workspaces)}"
    )


def _flavor_constraints(
    spec: TauSpec, policy: Policy, cluster_queue: str
) -> tuple[tuple[Mapping[str, str], ...], tuple[Mapping[str, str], ...]]:
    by_name = {f.name: f for f in policy.flavors}
    cq = next(c for c in policy.cluster_queues if c.name == cluster_queue)
    offered = [by_name[fq.flavor] for fq in cq.resources]
    res = spec.resources
    fitting = offered
    if res.gpu_type is not None:
        fitting = [f for f in fitting if f.gpu_type == res.gpu_type]
        if not fitting:
            raise UsageError(
                f"GPU type '{res.gpu_type}' is not offered by cluster queue '{cluster_queue}'; "
                f"its flavors: {_describe(offered)}"
            )
    if res.gpus:
        big_enough = [f for f in fitting if f.gpus_per_node is None or f.gpus_per_node >= res.gpus]
        if not big_enough:
            most = max(f.gpus_per_node or 0 for f in fitting)
            raise UsageError(
                f"run asks for {res.gpus} GPUs per node but the largest node of cluster queue "
                f"'{cluster_queue}' has {most} ({_describe(fitting)}); ask for at most {most} "
                "per node and more nodes"
            )
        fitting = big_enough
    if len(fitting) == len(offered) or any(not f.node_labels for f in fitting):
        # Nothing narrowed, or a flavor matches every node: no affinity can say it.
        return (), ()
    affinity = tuple(dict(f.node_labels) for f in fitting)
    tolerations: list[dict[str, str]] = []
    for f in fitting:
        if f.tolerate_taints:
            continue  # Kueue adds those tolerations itself on admission
        for t in f.taints:
            tol = {"key": t.key, "operator": "Exists", "effect": t.effect}
            if t.value is not None:
                tol = {"key": t.key, "operator": "Equal", "value": t.value, "effect": t.effect}
            if tol not in tolerations:
                tolerations.append(tol)
    return affinity, tuple(tolerations)


def _describe(flavors: list[Flavor]) -> str:
    parts = []
    for f in flavors:
        facts = [f"gpu_type {f.gpu_type}" if f.gpu_type else "no gpu_type"]
        if f.gpus_per_node is not None:
            facts.append(f"{f.gpus_per_node} GPUs per node")
        parts.append(f"{f.name} ({', '.join(facts)})")
    return ", ".join(parts)


def secret_refs(secrets: Mapping[str, str]) -> dict[str, SecretRef]:
    """Each secret reference as a key of the workspace's Secret (``taugrid-secrets``)."""
    out = {}
    for env_name, ref in secrets.items():
        if not _SECRET_KEY.fullmatch(ref) or len(ref) > 253:
            raise UsageError(
                f"secret reference {ref!r} (for {env_name}) cannot be a Kubernetes Secret key: "
                "letters, digits, '-', '_' and '.' only"
            )
        out[env_name] = SecretRef(WORKSPACE_SECRET, ref)
    return out


def attempt_input(
    spec: TauSpec,
    ident: AttemptIdentity,
    placement: ClusterPlacement,
    target: ClusterTarget,
    secrets: Mapping[str, SecretRef] | None = None,
) -> JobInput:
    """The renderer's input for one attempt. ``secrets`` default to the workspace's
    Secret (:func:`secret_refs`); the executor passes what its SecretStore resolved."""
    if not spec.image:
        raise UsageError("a cluster run needs an image: set image: in tau.yaml")
    checkpoints = f"{RUN_MOUNT}/checkpoints"
    ctx = WorkloadContext(
        run_id=ident.run_id,
        run_name=spec.name or ident.run_id,
        workspace=spec.workspace,
        attempt=ident.attempt,
        checkpoint_dir=checkpoints,
        output_dir=f"{RUN_MOUNT}/outputs",
        metrics_file=f"{RUN_MOUNT}/attempts/{ident.attempt}/metrics.jsonl",
        gpu_indices=(),
        resume_from=f"{checkpoints}/{ident.resume_from}" if ident.resume_from else None,
    )
    env = workload_env({}, spec.env, ctx)
    env.pop("CUDA_VISIBLE_DEVICES")  # the device plugin's job on a cluster
    name = job_name(ident.run_id, ident.attempt)
    return JobInput(
        run_id=ident.run_id,
        attempt=ident.attempt,
        workspace=spec.workspace,
        namespace=placement.namespace,
        queue=placement.queue,
        priority_class=placement.priority,
        image=spec.image,
        command=spec.command,
        setup=spec.setup,
        env=env,
        secrets=secret_refs(spec.secrets) if secrets is None else secrets,
        gpus=spec.resources.gpus,
        cpu_millis=spec.resources.cpus_millis,
        memory_bytes=spec.resources.memory_bytes,
        stop_grace_s=spec.stop_grace_seconds,
        timeout_s=spec.timeout_seconds,
        workdir=WORKDIR,
        nodes=spec.nodes,
        launcher=spec.launcher,
        procs_per_node=spec.resources.procs_per_node,
        node_affinity=placement.node_affinity,
        tolerations=placement.tolerations,
        code=CodeFetch(
            helper_image=target.helper_image,
            url=f"{target.server_url.rstrip('/')}/api/v1/snapshots/{ident.snapshot_digest}",
            digest=ident.snapshot_digest,
            token_secret=token_secret_name(name),
        ),
        storage=RunStorage(
            claim=placement.storage_claim, sub_path=f"runs/{ident.run_id}", mount=RUN_MOUNT
        ),
        object_sync=_object_sync(placement.storage, ident, target),
        report=PodReport(
            helper_image=target.helper_image,
            url=f"{target.server_url.rstrip('/')}/api/v1/runs/{ident.run_id}/attempts/{ident.attempt}",
            token_secret=token_secret_name(name),
            checkpoints=placement.storage_claim is not None,
        ),
    )


def _object_sync(
    storage: Storage | None, ident: AttemptIdentity, target: ClusterTarget
) -> ObjectSync | None:
    if storage is None or storage.url is None:
        return None
    return ObjectSync(
        helper_image=target.helper_image,
        url=storage.url,
        endpoint_url=storage.endpoint_url,
        credentials_secret=storage.credentials_secret,
        resume_step=ident.resume_from,
    )


def check_submit(spec: TauSpec, policy: Policy, target: ClusterTarget) -> None:
    """Everything :func:`render_attempt` would refuse for any attempt of ``spec``, at
    submit: the run id is the name and 5 random characters, and the last attempt
    (``restart.max``) has the longest object names."""
    run_id = f"{spec.name or 'run'}-{'x' * SUFFIX_LEN}"
    ident = AttemptIdentity(run_id, spec.restart.max, "0" * 64)
    render_attempt(attempt_input(spec, ident, place(spec, policy, target), target))


def token_secret_name(job: str) -> str:
    return f"{job}-code"


def render_attempt(
    inp: JobInput, token: str | None = None, report_token: str | None = None
) -> list[dict[str, Any]]:
    """Every object of one attempt, in creation order: the Secret of its code token (key
    ``token``) and report token (``report``), then the Service of an Indexed Job, then the
    workload object. Without tokens (a dry run) the Secret holds placeholders: the real
    ones are issued when the attempt launches."""
    if inp.launcher == "ray":
        workload = [render_rayjob(inp)]
    elif inp.launcher == "torchrun" or inp.nodes > 1:
        workload = render_indexed_job(inp)
    else:
        workload = [render_job(inp)]
    objects: list[dict[str, Any]] = []
    if inp.code is not None:
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {
                    "name": inp.code.token_secret,
                    "namespace": inp.namespace,
                    "labels": {**labels(inp), **MANAGED_BY},
                },
                "type": "Opaque",
                "stringData": {
                    "token": token if token is not None else TOKEN_PLACEHOLDER,
                    "report": report_token if report_token is not None else TOKEN_PLACEHOLDER,
                },
            }
        )
    return objects + workload
