"""What a run's attempt becomes on a cluster: pure functions from plain data to objects.

The first shape: ``nodes: 1`` with ``launcher: command`` is one
``batch/v1`` Job in the workspace's namespace, for Kueue to admit
(``shared/reference/kueue-kuberay-contract.md``):

- labels of DESIGN.md 3.6 on the Job and its pods, and Kueue's ``queue-name`` (the
  workspace's LocalQueue) and ``priority-class`` (a WorkloadPriorityClass);
- created suspended, so nothing runs unadmitted if Kueue's webhook is down; TauGrid never
  toggles ``suspend`` (Kueue unsuspends on admission and re-suspends on eviction, and
  injects the flavor's node labels and tolerations itself);
- one pod, never retried by the Job (``backoffLimit: 0``): a failed attempt restarts as a
  new attempt object under the run's ``restart`` policy; a disruption (eviction,
  preemption, a drained node) is not counted against it (``podFailurePolicy`` ignores
  ``DisruptionTarget``);
- ``terminationGracePeriodSeconds`` from ``stop_grace``, ``activeDeadlineSeconds`` from
  ``timeout``; requests and limits as strings, ``nvidia.com/gpu`` from ``resources.gpus``;
- the workload environment as given (DESIGN.md 3.3), secrets as ``secretKeyRef`` (never a
  value);
- a restricted, non-root security context for the pod and the container.

``launcher: torchrun`` or ``nodes > 1`` (``render_indexed_job``): an Indexed Job
(completions = parallelism = nodes) and a headless Service whose name is the pods'
subdomain, so rank 0 has a stable DNS name (``<job>-0.<service>``) before any pod is
ready: it is ``MASTER_ADDR``. ``NODE_RANK`` is the completion index (from the pod's
annotation), ``--nproc-per-node`` the GPUs per node (``resources.procs_per_node`` when
given). torchrun's argv is built as on one machine (``domain.launchers``).

``launcher: ray`` (``render_rayjob``): a KubeRay v1 RayJob with a CPU head and one worker
group of ``nodes`` pods, each with the run's resources; ``entrypoint`` from ``command``,
``shutdownAfterJobFinishes: true`` (Kueue's webhook requires it), created suspended, and
a name that is a DNS-1035 label of at most 47 characters (the operator's rule).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from taugrid.domain.launchers import TORCH_RUN_MODULE, torchrun_target
from taugrid.errors import UsageError
from taugrid.policy.quantities import format_cpu, format_memory

MANAGED_BY = {"taugrid.io/managed-by": "taugrid"}
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
GPU_RESOURCE = "nvidia.com/gpu"
CONTAINER = "workload"
NAME_MAX = 63  # the Job's name is also its pods' job-name label value
# The image's user when it names none: the restricted pod security standard needs a
# non-root uid, and a number (not a name) for the kubelet to check it.
DEFAULT_UID = 1000
MASTER_PORT = 29500  # torchrun's default; every rank of a run has its own pod and IP
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
RAYJOB_NAME_MAX = 47  # KubeRay's check: the names of the cluster's objects derive from it
_DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
RAY_WORKERS = "workers"  # the one worker group ("head" is reserved by Kueue)
# The head schedules and serves the dashboard; the workers run the entrypoint's tasks.
RAY_HEAD_CPU_MILLIS = 1000
RAY_HEAD_MEMORY_BYTES = 2 << 30


@dataclass(frozen=True)
class SecretRef:
    """Where the workload's value of one environment variable is: a key of a Secret in
    the run's namespace."""

    secret: str
    key: str


@dataclass(frozen=True)
class CodeFetch:
    """How the pod gets the run's code snapshot with no image rebuild: an init container
    of TauGrid's own image fetches the archive from the server with the attempt's
    read-only token (a key of a Secret the executor creates per attempt), checks its
    digest and unpacks it into the volume that is the workload's working directory."""

    helper_image: str
    url: str  # the server's snapshot endpoint for this digest
    digest: str  # sha256 of the archive; the helper refuses any other bytes
    token_secret: str  # the per-attempt Secret holding ``token``


@dataclass(frozen=True)
class RunStorage:
    """Where TAU_CHECKPOINT_DIR and TAU_OUTPUT_DIR live: the workspace's PVC (the run's
    own subdirectory of it), or, with no claim, a volume that dies with the pod."""

    claim: str | None  # a PersistentVolumeClaim in the run's namespace
    sub_path: str  # the run's directory on the claim, e.g. runs/<run id>
    mount: str = "/tau/run"


@dataclass(frozen=True)
class ObjectSync:
    """Checkpoints and outputs in object storage (a workspace's ``storage.url``): the
    workload writes to an emptyDir as on any disk; an init container of TauGrid's image
    first downloads the checkpoint the server chose (``resume_step``), and a native
    sidecar (``restartPolicy: Always``) uploads each checkpoint once the SDK has
    committed it, and the outputs at the end (``taugrid.podstorage``). Credentials come
    from the workspace's Secret by reference, never as values."""

    helper_image: str
    url: str  # s3://bucket[/prefix]
    endpoint_url: str | None = None
    credentials_secret: str | None = None  # keys AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY
    resume_step: str | None = None  # a step directory name (step-...), or None
    interval_s: int = 5  # between the sidecar's passes


@dataclass(frozen=True)
class PodReport:
    """The native sidecar that tells the server what only the pod sees
    (``taugrid.podreport``): the attempt's metrics lines and, on a workspace's PVC, the
    checkpoints with their verdict. It reads the run's volume read-only and holds the
    attempt's report token (key ``report`` of the attempt's Secret), which the workload's
    container never gets. In rank 0's pod it speaks; in the others it only waits."""

    helper_image: str
    url: str  # the server's /api/v1/runs/<run>/attempts/<k>
    token_secret: str
    checkpoints: bool  # a PVC: the server cannot list them itself
    interval_s: int = 5


@dataclass(frozen=True)
class JobInput:
    run_id: str
    attempt: int
    workspace: str
    namespace: str
    queue: str  # the workspace's LocalQueue
    image: str
    command: list[str] | str  # argv, or a shell command line
    env: Mapping[str, str] = field(default_factory=dict)  # the workload environment
    secrets: Mapping[str, SecretRef] = field(default_factory=dict)
    priority_class: str | None = None
    gpus: int = 0
    cpu_millis: int | None = None
    memory_bytes: int | None = None
    stop_grace_s: float = 60.0
    timeout_s: float | None = None
    workdir: str = "/workspace"
    nodes: int = 1  # pods, one per node (an Indexed Job when > 1 or with torchrun)
    launcher: str = "command"  # command | torchrun
    procs_per_node: int | None = None
    # The flavors a run may land on, when it asked for a GPU type: one node-label set
    # per flavor (any of them will do), and the tolerations its taints need.
    node_affinity: tuple[Mapping[str, str], ...] = ()
    tolerations: tuple[Mapping[str, str], ...] = ()
    code: CodeFetch | None = None
    storage: RunStorage | None = None
    setup: str | None = None  # a shell command run before the command, in the same container
    object_sync: ObjectSync | None = None  # with storage: the run's files in a bucket
    report: PodReport | None = None  # with storage: metrics and checkpoints to the server


def job_name(run_id: str, attempt: int) -> str:
    """One object per attempt (a restart is a new Job, never a toggled one)."""
    name = f"{run_id}-a{attempt}"
    if len(name) > NAME_MAX:
        raise UsageError(
            f"run id {run_id!r} is too long for a Kubernetes Job name "
            f"({len(name)} > {NAME_MAX} characters with the attempt suffix)"
        )
    return name


def labels(inp: JobInput) -> dict[str, str]:
    return {
        "taugrid.io/run-id": inp.run_id,
        "taugrid.io/workspace": inp.workspace,
        "taugrid.io/attempt": str(inp.attempt),
        **MANAGED_BY,
    }


def render_job(inp: JobInput) -> dict[str, Any]:
    """The Job of one attempt of a ``nodes: 1``, ``launcher: command`` run."""
    if inp.nodes != 1 or inp.launcher != "command":
        raise UsageError("render_job renders nodes: 1 with launcher: command only")
    return _job(inp, _pod_spec(inp))


def render_indexed_job(inp: JobInput) -> list[dict[str, Any]]:
    """The headless Service and the Indexed Job of one attempt of a ``launcher: torchrun``
    or ``nodes > 1`` run, in the order they are created."""
    if inp.launcher not in ("command", "torchrun"):
        raise UsageError(f"launcher {inp.launcher!r} is not rendered as an Indexed Job")
    if inp.nodes < 1:
        raise UsageError(f"nodes must be at least 1 (got {inp.nodes})")
    name = job_name(inp.run_id, inp.attempt)
    if len(f"{name}-{inp.nodes - 1}") > NAME_MAX:  # each pod's hostname is <job>-<index>
        raise UsageError(
            f"run id {inp.run_id!r} is too long for {inp.nodes} pods' host names "
            f"(<job>-<index> must fit in {NAME_MAX} characters)"
        )
    master = f"{name}-0.{name}"  # rank 0's pod hostname in the Service's subdomain
    nprocs = inp.procs_per_node or inp.gpus or 1
    rendezvous = {
        "MASTER_ADDR": master,
        "MASTER_PORT": str(MASTER_PORT),
        "NNODES": str(inp.nodes),
        "WORLD_SIZE": str(inp.nodes * nprocs),
        "TAU_DIST_BACKEND": "nccl" if inp.gpus else "gloo",
    }
    clash = sorted(set(rendezvous) & (set(inp.env) | set(inp.secrets)))
    if clash:
        raise UsageError(f"the launcher sets {', '.join(clash)}; leave them out of env:")
    with_rdzv = JobInput(**{**inp.__dict__, "env": {**inp.env, **rendezvous}})
    pod = _pod_spec(with_rdzv)
    pod["subdomain"] = name
    container = pod["containers"][0]
    # NODE_RANK is the pod's completion index; the API server expands $(NODE_RANK) in
    # the command because the variable is defined in the container.
    container["env"].append(
        {
            "name": "NODE_RANK",
            "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{INDEX_ANNOTATION}']"}},
        }
    )
    if inp.launcher == "torchrun":
        python, target = torchrun_target(inp.command)
        container["command"] = [
            python,
            "-m",
            TORCH_RUN_MODULE,
            f"--nnodes={inp.nodes}",
            "--node-rank=$(NODE_RANK)",
            f"--nproc-per-node={nprocs}",
            f"--master-addr={master}",
            f"--master-port={MASTER_PORT}",
            *target,
        ]
        container["command"] = with_setup(container["command"], inp.setup)
    job = _job(inp, pod)
    job["spec"].update(completionMode="Indexed", completions=inp.nodes, parallelism=inp.nodes)
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": inp.namespace, "labels": labels(inp)},
        "spec": {
            "clusterIP": "None",
            # Ranks find each other before any is ready (the rendezvous is what readies them).
            "publishNotReadyAddresses": True,
            "selector": {
                "taugrid.io/run-id": inp.run_id,
                "taugrid.io/attempt": str(inp.attempt),
            },
        },
    }
    return [service, job]


def _job(inp: JobInput, pod: dict[str, Any]) -> dict[str, Any]:
    if not inp.image:
        raise UsageError("a cluster run needs an image (image: in tau.yaml)")
    own = labels(inp)
    job_labels = {**own, QUEUE_LABEL: inp.queue}
    if inp.priority_class:
        job_labels[PRIORITY_LABEL] = inp.priority_class
    spec: dict[str, Any] = {
        "suspend": True,
        "backoffLimit": 0,
        "podFailurePolicy": {
            "rules": [
                {
                    "action": "Ignore",
                    "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
                },
            ]
        },
        "template": {
            "metadata": {"labels": own},
            "spec": pod,
        },
    }
    if inp.timeout_s is not None:
        spec["activeDeadlineSeconds"] = max(1, math.ceil(inp.timeout_s))
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name(inp.run_id, inp.attempt),
            "namespace": inp.namespace,
            "labels": job_labels,
        },
        "spec": spec,
    }


def _pod_spec(inp: JobInput) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": inp.image,
        "workingDir": inp.workdir,
        "env": _env(inp),
        "resources": _resources(inp),
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "runAsNonRoot": True,
        },
    }
    if isinstance(inp.command, str):
        container["command"] = ["/bin/sh", "-c", inp.command]
    else:
        container["command"] = list(inp.command)
    container["command"] = with_setup(container["command"], inp.setup)
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": max(0, math.ceil(inp.stop_grace_s)),
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": DEFAULT_UID,
            "runAsGroup": DEFAULT_UID,
            "fsGroup": DEFAULT_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
    }
    mounts, volumes = _volumes(inp)
    if mounts:
        container["volumeMounts"] = mounts
        pod["volumes"] = volumes
    if inp.code is not None:
        pod["initContainers"] = [_fetch_code(inp.code, inp.workdir)]
    if inp.object_sync is not None and inp.storage is not None:
        pod.setdefault("initContainers", []).extend(_object_sync(inp, inp.object_sync))
    if inp.report is not None and inp.storage is not None:
        pod.setdefault("initContainers", []).append(_reporter(inp, inp.report))
    if inp.node_affinity:
        pod["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": k, "operator": "In", "values": [v]}
                                for k, v in sorted(labels.items())
                            ]
                        }
                        for labels in inp.node_affinity
                    ]
                }
            }
        }
    if inp.tolerations:
        pod["tolerations"] = [dict(t) for t in inp.tolerations]
    return pod


CODE_VOLUME = "code"
RUN_VOLUME = "run-data"
FETCH_CONTAINER = "fetch-code"
PODHELPER_MODULE = "taugrid.podhelper"


def _volumes(inp: JobInput) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The code volume at the working directory, the run's storage at its mount."""
    mounts: list[dict[str, Any]] = []
    volumes: list[dict[str, Any]] = []
    if inp.code is not None:
        mounts.append({"name": CODE_VOLUME, "mountPath": inp.workdir})
        volumes.append({"name": CODE_VOLUME, "emptyDir": {}})
    if inp.storage is not None:
        st = inp.storage
        if st.claim is not None:
            mounts.append({"name": RUN_VOLUME, "mountPath": st.mount, "subPath": st.sub_path})
            volumes.append({"name": RUN_VOLUME, "persistentVolumeClaim": {"claimName": st.claim}})
        else:
            mounts.append({"name": RUN_VOLUME, "mountPath": st.mount})
            volumes.append({"name": RUN_VOLUME, "emptyDir": {}})
    return mounts, volumes


def _fetch_code(code: CodeFetch, workdir: str) -> dict[str, Any]:
    """The init container that puts the snapshot in the working directory."""
    return {
        "name": FETCH_CONTAINER,
        "image": code.helper_image,
        "command": ["python", "-m", PODHELPER_MODULE, "fetch-code"],
        "env": [
            {"name": "TAU_SNAPSHOT_URL", "value": code.url},
            {"name": "TAU_SNAPSHOT_SHA256", "value": code.digest},
            {"name": "TAU_CODE_DIR", "value": workdir},
            {
                "name": "TAU_SNAPSHOT_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": code.token_secret, "key": "token"}},
            },
        ],
        "resources": {
            "requests": {"cpu": "100m", "memory": "128Mi"},
            "limits": {"memory": "512Mi"},
        },
        "volumeMounts": [{"name": CODE_VOLUME, "mountPath": workdir}],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "runAsNonRoot": True,
            "readOnlyRootFilesystem": True,
        },
    }


RESUME_CONTAINER = "fetch-resume"
SYNC_CONTAINER = "sync-checkpoints"
STORAGE_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


def _object_sync(inp: JobInput, sync: ObjectSync) -> list[dict[str, Any]]:
    """The helpers that move the run's files between its emptyDir and the bucket, in
    start order: the resume point's download (only when resuming), then the sidecar,
    which starts after it (init containers start in order) so it finds the fetched
    checkpoint already in place and does not upload it again."""
    assert inp.storage is not None
    env: list[dict[str, Any]] = [
        {"name": "TAU_STORAGE_URL", "value": sync.url},
        {"name": "TAU_RUN_ID", "value": inp.run_id},
        {"name": "TAU_CHECKPOINT_DIR", "value": inp.env["TAU_CHECKPOINT_DIR"]},
    ]
    if sync.endpoint_url:
        env.append({"name": "TAU_STORAGE_ENDPOINT", "value": sync.endpoint_url})
    if sync.credentials_secret:
        env += [
            {
                "name": key,
                "valueFrom": {"secretKeyRef": {"name": sync.credentials_secret, "key": key}},
            }
            for key in STORAGE_KEYS
        ]
    mounts = [{"name": RUN_VOLUME, "mountPath": inp.storage.mount}]
    out = []
    if sync.resume_step:
        out.append(
            _helper(
                RESUME_CONTAINER,
                sync.helper_image,
                [*env, {"name": "TAU_RESUME_STEP", "value": sync.resume_step}],
                mounts,
            )
        )
    sidecar_env = [
        *env,
        {"name": "TAU_OUTPUT_DIR", "value": inp.env["TAU_OUTPUT_DIR"]},
        {"name": "TAU_SYNC_INTERVAL", "value": str(sync.interval_s)},
    ]
    sidecar = _helper(SYNC_CONTAINER, sync.helper_image, sidecar_env, mounts)
    sidecar["restartPolicy"] = "Always"  # a native sidecar: it runs beside the workload
    out.append(sidecar)
    return out


REPORT_CONTAINER = "report"


def _reporter(inp: JobInput, report: PodReport) -> dict[str, Any]:
    assert inp.storage is not None
    env: list[dict[str, Any]] = [
        {"name": "TAU_REPORT_URL", "value": report.url},
        {
            "name": "TAU_REPORT_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": report.token_secret, "key": "report"}},
        },
        {"name": "TAU_METRICS_FILE", "value": inp.env["TAU_METRICS_FILE"]},
        {"name": "TAU_REPORT_INTERVAL", "value": str(report.interval_s)},
    ]
    if report.checkpoints:
        env += [
            {"name": "TAU_CHECKPOINT_DIR", "value": inp.env["TAU_CHECKPOINT_DIR"]},
            {"name": "TAU_REPORT_CHECKPOINTS", "value": "1"},
        ]
    mount: dict[str, Any] = {"name": RUN_VOLUME, "mountPath": inp.storage.mount, "readOnly": True}
    if inp.storage.claim is not None:
        mount["subPath"] = inp.storage.sub_path
    sidecar = _helper(REPORT_CONTAINER, report.helper_image, env, [mount])
    sidecar["restartPolicy"] = "Always"  # a native sidecar: it runs beside the workload
    return sidecar


def _helper(
    name: str, image: str, env: list[dict[str, Any]], mounts: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "name": name,
        "image": image,
        "command": ["python", "-m", PODHELPER_MODULE, name],
        # Copies: containers sharing one dict would be YAML anchors in `tau render`.
        "env": copy.deepcopy(env),
        "resources": {
            "requests": {"cpu": "100m", "memory": "128Mi"},
            "limits": {"memory": "512Mi"},
        },
        "volumeMounts": copy.deepcopy(mounts),
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "runAsNonRoot": True,
            "readOnlyRootFilesystem": True,
        },
    }


def with_setup(argv: list[str], setup: str | None) -> list[str]:
    """``setup`` first (a failing line fails the attempt, as locally), then ``argv``
    exec'd as given: ``sh -c '...; exec "$0" "$@"' ARGV`` passes the argv through
    untouched (no re-quoting of the user's words)."""
    if not setup:
        return argv
    return ["/bin/sh", "-c", f'set -e\n{setup}\nexec "$0" "$@"', *argv]


def _env(inp: JobInput) -> list[dict[str, Any]]:
    clash = sorted(set(inp.env) & set(inp.secrets))
    if clash:
        raise UsageError(f"environment variables set both as values and as secrets: {clash}")
    out: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in sorted(inp.env.items())]
    for name, ref in sorted(inp.secrets.items()):
        out.append(
            {"name": name, "valueFrom": {"secretKeyRef": {"name": ref.secret, "key": ref.key}}}
        )
    return out


def _resources(inp: JobInput) -> dict[str, Any]:
    """Quantities always as strings. CPU is requested, not limited (a CPU limit throttles a
    data loader for nothing); memory's request is its limit (an overcommitted node kills
    the biggest pod first); GPUs are extended resources: request equals limit."""
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    if inp.cpu_millis:
        requests["cpu"] = format_cpu(inp.cpu_millis)
    if inp.memory_bytes:
        requests["memory"] = limits["memory"] = format_memory(inp.memory_bytes)
    if inp.gpus:
        requests[GPU_RESOURCE] = limits[GPU_RESOURCE] = str(inp.gpus)
    out: dict[str, Any] = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out


def render_rayjob(inp: JobInput) -> dict[str, Any]:
    """The RayJob of one attempt of a ``launcher: ray`` run: a head and ``nodes`` workers."""
    if inp.launcher != "ray":
        raise UsageError("render_rayjob renders launcher: ray only")
    if not inp.image:
        raise UsageError("a cluster run needs an image (image: in tau.yaml)")
    if inp.nodes < 1:
        raise UsageError(f"nodes must be at least 1 (got {inp.nodes})")
    name = job_name(inp.run_id, inp.attempt)
    if len(name) > RAYJOB_NAME_MAX or not _DNS_1035.fullmatch(name):
        raise UsageError(
            f"run id {inp.run_id!r} cannot name a RayJob: {name!r} must be a DNS-1035 label "
            f"(a letter first) of at most {RAYJOB_NAME_MAX} characters"
        )
    own = labels(inp)
    job_labels = {**own, QUEUE_LABEL: inp.queue}
    if inp.priority_class:
        job_labels[PRIORITY_LABEL] = inp.priority_class
    entrypoint = inp.command if isinstance(inp.command, str) else shlex.join(inp.command)
    if inp.setup:
        entrypoint = f"{inp.setup} && {entrypoint}"
    head = JobInput(
        **{
            **inp.__dict__,
            "gpus": 0,
            "cpu_millis": RAY_HEAD_CPU_MILLIS,
            "memory_bytes": RAY_HEAD_MEMORY_BYTES,
        }
    )
    spec: dict[str, Any] = {
        "entrypoint": entrypoint,
        "shutdownAfterJobFinishes": True,
        "suspend": True,
        "backoffLimit": 0,  # a failed attempt restarts as a new RayJob, under restart:
        "submissionMode": "K8sJobMode",
        "rayClusterSpec": {
            "headGroupSpec": {
                "rayStartParams": {},
                "template": {"metadata": {"labels": own}, "spec": _ray_pod(head, "ray-head")},
            },
            "workerGroupSpecs": [
                {
                    "groupName": RAY_WORKERS,
                    "replicas": inp.nodes,
                    "minReplicas": inp.nodes,
                    "maxReplicas": inp.nodes,
                    "rayStartParams": {},
                    "template": {
                        "metadata": {"labels": own},
                        # The head's sidecar reports: the driver runs there.
                        "spec": _ray_pod(dataclasses.replace(inp, report=None), "ray-worker"),
                    },
                }
            ],
        },
    }
    spec["submitterPodTemplate"] = _submitter_template(head, own)
    if inp.timeout_s is not None:
        spec["activeDeadlineSeconds"] = max(1, math.ceil(inp.timeout_s))
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": name, "namespace": inp.namespace, "labels": job_labels},
        "spec": spec,
    }


RAY_SUBMITTER = "ray-job-submitter"


def _submitter_template(head: JobInput, own: dict[str, str]) -> dict[str, Any]:
    """KubeRay's submitter pod (K8sJobMode) carrying TauGrid's labels, so its log (the
    Ray job's output) is archived with the attempt's others. No command: KubeRay puts
    ``ray job submit ... -- <entrypoint>`` into its first container. The resources are
    KubeRay's defaults for it, which Kueue counts in the submitter's pod set."""
    pod = _pod_spec(head)
    return {
        "metadata": {"labels": own},
        "spec": {
            "restartPolicy": "Never",
            "securityContext": pod["securityContext"],
            "containers": [
                {
                    "name": RAY_SUBMITTER,
                    "image": head.image,
                    "resources": {
                        "requests": {"cpu": "500m", "memory": "200Mi"},
                        "limits": {"cpu": "1", "memory": "1Gi"},
                    },
                    "securityContext": pod["containers"][0]["securityContext"],
                }
            ],
        },
    }


def _ray_pod(inp: JobInput, container: str) -> dict[str, Any]:
    """A Ray pod: the run's image and environment; Ray's own command is KubeRay's."""
    pod = _pod_spec(inp)
    del pod["restartPolicy"]  # KubeRay manages the pods of its cluster
    (main,) = pod["containers"]
    main["name"] = container
    del main["command"]
    return pod
