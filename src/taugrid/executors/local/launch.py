"""How a run's command becomes the process the supervisor starts (``launcher:``). Pure.

``launch_command`` turns the spec's command into the argv (or shell string) to run and
the extra environment the launcher needs. Local mode runs every launcher on this one
machine:

- ``command``: the command as is, no extra environment.
- ``torchrun``: ``<python> -m torch.distributed.run --nnodes=1 --node-rank=0
  --nproc-per-node=N --master-addr=127.0.0.1 --master-port=P <target>``.

  ``<python>`` is the interpreter the command names (``python``, ``python3``,
  ``/opt/venv/bin/python``, ...), else ``python3``, looked up on the workload's ``PATH``
  (the submitter's environment) when the supervisor starts it. Running the module rather
  than the ``torchrun`` console script means the launcher and its workers run under the
  very interpreter that would have run the command without torchrun, and a ``torchrun``
  shim of another environment earlier on ``PATH`` cannot take over.

  ``<target>`` is what torchrun runs in each worker:
  ``python train.py a b`` -> ``train.py a b``; ``python -m pkg.mod a`` -> ``-m pkg.mod a``;
  ``train.py a`` -> ``train.py a`` (torchrun runs scripts with its own interpreter and
  ``-u``, so a leading ``-u`` is dropped); anything else, including ``python`` with other
  interpreter options (``-O``, ``-X``, ``-c``, ...), runs as is: ``--no-python <argv>``.
  A string (shell) command without shell syntax is split with :func:`shlex.split` and
  treated like a list. One with shell syntax (``$VAR``, ``&&``, pipes, redirections,
  globs, ...) runs in a shell in each worker, ``--no-python /bin/sh -c <command>``, so the
  shell still expands it, in each worker's environment (``RANK``, ``LOCAL_RANK``, ...);
  the launcher's interpreter is then the python the command starts with, if any.

  N is ``procs_per_node`` when given, else one process per GPU of the placement, else 1.
  The extra environment is ``MASTER_ADDR``, ``MASTER_PORT``, ``NNODES``, ``NODE_RANK``,
  ``WORLD_SIZE`` (torchrun sets the same per worker, plus ``RANK`` and ``LOCAL_RANK``) and
  ``TAU_DIST_BACKEND``: ``nccl`` when the run has GPUs, ``gloo`` otherwise.
- ``ray``: a single-node Ray cluster of the attempt's own, the command its job
  (:func:`ray_command`, ``raydriver``); one node only.

``nodes: N`` (2 up to ``LOCAL.max_nodes``): :func:`launch_nodes` gives each of the N
"nodes" on this machine what the cluster's Indexed Job gives each pod
(``manifests.workloads.render_indexed_job``): the command once per node (``command``), or
one torchrun per node with ``--nnodes=N --node-rank=i --nproc-per-node=P
--master-addr=127.0.0.1 --master-port=<free port>`` (``torchrun``); and, for every
launcher, ``MASTER_ADDR``, ``MASTER_PORT``, ``NNODES``, ``NODE_RANK``, ``WORLD_SIZE``
(N x P) and ``TAU_DIST_BACKEND``. The placement holds N x ``resources.gpus`` GPUs (the
admission multiplies the request by ``nodes``); node i gets the i-th slice of them as its
``CUDA_VISIBLE_DEVICES``, and P is ``procs_per_node``, else its GPUs, else 1. The
supervisor runs the nodes as one unit (``nodegroup``).
"""

from __future__ import annotations

import math
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from taugrid.domain.launchers import TORCH_RUN_MODULE, torchrun_target
from taugrid.errors import UsageError
from taugrid.executors.local import raydriver
from taugrid.spec.modes import LOCAL
from taugrid.spec.units import cpu_millis

LOCALHOST = "127.0.0.1"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, then closed)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOCALHOST, 0))
        return int(s.getsockname()[1])


def launch_command(
    command: list[str] | str,
    *,
    launcher: str,
    nodes: int,
    gpu_indices: Sequence[int],
    procs_per_node: int | None,
    master_port: int,
) -> tuple[list[str] | str, dict[str, str]]:
    """The command to start for ``launcher`` and the environment to add to the workload's,
    for a run of one node (:func:`launch_nodes` for more).

    Raises :class:`UsageError` for what local mode cannot run (see the module docstring).
    """
    if nodes > 1:
        raise UsageError(f"nodes: {nodes}: launch_command starts one node; see launch_nodes")
    _check(launcher=launcher, nodes=nodes, procs_per_node=procs_per_node, port=master_port)
    if launcher == "command":
        return command, {}
    nprocs = procs_per_node if procs_per_node is not None else (len(gpu_indices) or 1)
    python, target = torchrun_target(command)
    argv = [
        python,
        "-m",
        TORCH_RUN_MODULE,
        "--nnodes=1",
        "--node-rank=0",
        f"--nproc-per-node={nprocs}",
        f"--master-addr={LOCALHOST}",
        f"--master-port={master_port}",
        *target,
    ]
    env = {
        "MASTER_ADDR": LOCALHOST,
        "MASTER_PORT": str(master_port),
        "NNODES": "1",
        "NODE_RANK": "0",
        "WORLD_SIZE": str(nprocs),
        "TAU_DIST_BACKEND": "nccl" if gpu_indices else "gloo",
    }
    return argv, env


@dataclass(frozen=True)
class NodeLaunch:
    """What one node of a run starts: its command, and what its launcher adds to the
    run's environment (for ``nodes > 1``: the rendezvous and the node's GPUs)."""

    command: list[str] | str
    env: dict[str, str]


def launch_nodes(
    command: list[str] | str,
    *,
    launcher: str,
    nodes: int,
    gpu_indices: Sequence[int],
    procs_per_node: int | None,
    master_port: int,
) -> list[NodeLaunch]:
    """One :class:`NodeLaunch` per node (see the module docstring); for ``nodes: 1``
    exactly :func:`launch_command`'s. Raises :class:`UsageError` for what local mode
    cannot run."""
    if nodes <= 1:
        argv, env = launch_command(
            command,
            launcher=launcher,
            nodes=nodes,
            gpu_indices=gpu_indices,
            procs_per_node=procs_per_node,
            master_port=master_port,
        )
        return [NodeLaunch(argv, env)]
    _check(launcher=launcher, nodes=nodes, procs_per_node=procs_per_node, port=master_port)
    slices = gpu_slices(gpu_indices, nodes)
    nprocs = procs_per_node if procs_per_node is not None else (len(slices[0]) or 1)
    rendezvous = {
        "MASTER_ADDR": LOCALHOST,
        "MASTER_PORT": str(master_port),
        "NNODES": str(nodes),
        "WORLD_SIZE": str(nodes * nprocs),
        "TAU_DIST_BACKEND": "nccl" if gpu_indices else "gloo",
    }
    target = torchrun_target(command) if launcher == "torchrun" else None
    out = []
    for rank, gpus in enumerate(slices):
        env = {
            **rendezvous,
            "NODE_RANK": str(rank),
            "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in gpus),
        }
        if target is None:
            out.append(NodeLaunch(command, env))
            continue
        python, args = target
        argv = [
            python,
            "-m",
            TORCH_RUN_MODULE,
            f"--nnodes={nodes}",
            f"--node-rank={rank}",
            f"--nproc-per-node={nprocs}",
            f"--master-addr={LOCALHOST}",
            f"--master-port={master_port}",
            *args,
        ]
        out.append(NodeLaunch(argv, env))
    return out


def gpu_slices(gpu_indices: Sequence[int], nodes: int) -> list[tuple[int, ...]]:
    """Each node's GPUs: the placement's, in order, the same number to every node."""
    if len(gpu_indices) % nodes:
        raise UsageError(
            f"the placement's {len(gpu_indices)} GPUs cannot be shared evenly by {nodes} nodes"
        )
    each = len(gpu_indices) // nodes
    return [tuple(gpu_indices[i * each : (i + 1) * each]) for i in range(nodes)]


RAY_NODES = (
    "nodes: {nodes}: launcher: ray runs a single-node Ray cluster in local mode; use "
    "nodes: 1 (Ray spreads the job's tasks over the run's CPUs and GPUs) or the "
    "Kubernetes mode"
)


def ray_command(
    command: list[str] | str,
    *,
    setup: str | None,
    python: str,
    ray: str,
    run_id: str,
    attempt: int,
    nodes: int,
    gpu_indices: Sequence[int],
    resources: Mapping[str, Any],
    stop_grace_s: float,
    hidden_env: Sequence[str],
) -> list[str]:
    """The workload command of a ``launcher: ray`` attempt: ``raydriver`` under the
    server's ``python``, driving the ``ray`` CLI beside it: the run's own single-node
    cluster with the placement's GPUs and ``resources.cpus`` (rounded up), and ``setup
    && command`` its job's entrypoint (so the supervisor runs no setup of its own).
    ``hidden_env``: the secrets' names, kept out of Ray's runtime env."""
    if nodes != 1:
        raise UsageError(RAY_NODES.format(nodes=nodes))
    return raydriver.driver_argv(
        python,
        ray=ray,
        run_id=run_id,
        attempt=attempt,
        gpus=len(gpu_indices),
        cpus=ray_cpus(resources),
        stop_grace_s=stop_grace_s,
        hidden_env=hidden_env,
        command=command,
        setup=setup,
    )


def ray_cpus(resources: Mapping[str, Any]) -> int | None:
    """Ray's ``--num-cpus`` for ``resources.cpus``: whole CPUs, rounded up, at least 1;
    None (what Ray detects) when the spec names none."""
    cpus = resources.get("cpus")
    if cpus is None:
        return None
    return max(1, math.ceil(cpu_millis(cpus) / 1000))


def _check(*, launcher: str, nodes: int, procs_per_node: int | None, port: int) -> None:
    if nodes < 1:
        raise UsageError(f"nodes must be at least 1 (got {nodes})")
    if nodes > LOCAL.max_nodes:
        raise UsageError(
            f"nodes: {nodes}: local mode runs at most {LOCAL.max_nodes} nodes, all on this "
            "machine; more need the Kubernetes mode"
        )
    if procs_per_node is not None and procs_per_node < 1:
        raise UsageError(f"resources.procs_per_node must be at least 1 (got {procs_per_node})")
    if launcher == "ray":
        raise UsageError(
            "launcher: ray starts a Ray cluster of its own: see ray_command"
            if nodes == 1
            else RAY_NODES.format(nodes=nodes)
        )
    if launcher not in ("command", "torchrun"):
        raise UsageError(f"unknown launcher {launcher!r}: expected one of command, torchrun, ray")
    if (launcher == "torchrun" or nodes > 1) and not 0 < port < 65536:
        raise UsageError(f"master port must be in 1..65535 (got {port})")
