"""Every rank of every node in one collective: proof that a multi-node run is one world.

Run by ``launcher: torchrun`` with ``nodes: 2`` (tau.yaml): each node's torchrun starts
``procs_per_node`` workers and gives them ``RANK``, ``LOCAL_RANK`` and ``WORLD_SIZE``;
TauGrid gives each node ``NODE_RANK``, ``NNODES`` and the rendezvous (``MASTER_ADDR``,
``MASTER_PORT``), the same on one machine as on a cluster.

- each rank contributes ``rank + 1`` to an ``all_reduce``: the sum is
  ``W * (W + 1) / 2`` only if all ``W = WORLD_SIZE`` ranks took part;
- rank 0 writes the result as a checkpoint through the SDK
  (``taugrid.checkpoint.saving``), and every rank waits for it at a barrier.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist

import taugrid


def say(line: str) -> None:
    """One write per line: the ranks of a node share its output, and two ranks' print()
    (the text, then the newline) could interleave."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main() -> int:
    torch.set_num_threads(1)
    backend = os.environ.get("TAU_DIST_BACKEND", "gloo")
    dist.init_process_group(backend)  # env://: the rendezvous torchrun set up
    rank, world = dist.get_rank(), dist.get_world_size()
    node, nodes = os.environ.get("NODE_RANK", "0"), os.environ.get("NNODES", "1")
    local = os.environ.get("LOCAL_RANK", "0")
    say(f"rank {rank}/{world} on node {node} of {nodes} (local rank {local})")

    device = torch.device("cuda", int(local)) if backend == "nccl" else torch.device("cpu")
    total = torch.tensor([float(rank + 1)], device=device)
    dist.all_reduce(total)  # a sum over every rank of every node
    expected = world * (world + 1) // 2
    got = int(total.item())
    if rank == 0:
        say(f"all_reduce sum {got} over {world} ranks (expected {expected})")
        with taugrid.checkpoint.saving(1) as d:
            torch.save({"world_size": world, "sum": got}, d / "result.pt")
    dist.barrier()  # nobody exits before rank 0's checkpoint is committed
    dist.destroy_process_group()
    return 0 if got == expected else 1


if __name__ == "__main__":
    sys.exit(main())
