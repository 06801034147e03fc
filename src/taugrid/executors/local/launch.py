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
- ``ray``: not supported in local mode yet (:class:`UsageError`).

More than one node is a :class:`UsageError` for every launcher: local mode runs on one
machine; multi-node runs need the Kubernetes mode.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence

from taugrid.domain.launchers import TORCH_RUN_MODULE, torchrun_target
from taugrid.errors import UsageError

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
    """The command to start for ``launcher`` and the environment to add to the workload's.

    Raises :class:`UsageError` for what local mode cannot run (see the module docstring).
    """
    if nodes < 1:
        raise UsageError(f"nodes must be at least 1 (got {nodes})")
    if nodes > 1:
        raise UsageError(
            f"nodes: {nodes}: local mode runs on one machine; "
            "multi-node runs need the Kubernetes mode (or set nodes: 1)"
        )
    if procs_per_node is not None and procs_per_node < 1:
        raise UsageError(f"resources.procs_per_node must be at least 1 (got {procs_per_node})")
    if launcher == "command":
        return command, {}
    if launcher == "ray":
        raise UsageError(
            "launcher: ray is not supported in local mode yet; use launcher: command "
            "(and start Ray from your command) or the Kubernetes mode"
        )
    if launcher != "torchrun":
        raise UsageError(f"unknown launcher {launcher!r}: expected one of command, torchrun, ray")
    if not 0 < master_port < 65536:
        raise UsageError(f"master port must be in 1..65535 (got {master_port})")
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
