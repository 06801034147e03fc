"""Data-parallel PyTorch training that survives being killed: checkpoints and resume.

A small MLP learns a synthetic regression task (fixed seed) with DistributedDataParallel
on the backend in $TAU_DIST_BACKEND (gloo on CPU, nccl on GPUs; TauGrid's torchrun
launcher sets it). Every batch is a function of the step number only, so a run that is
killed and resumed from a checkpoint follows the same trajectory as one that never was.

- resume: every rank loads the checkpoint rank 0 picked with ``taugrid.checkpoint.latest()``
  (``$TAU_RESUME_FROM`` on a restart) and continues at the step after it;
- checkpoint: every ``--ckpt-every`` steps rank 0 writes model and optimizer state through
  ``taugrid.checkpoint.saving(step)`` (committed atomically with a manifest), and all
  ranks wait for it at a barrier;
- stop: once any rank saw SIGTERM (``taugrid.should_stop()``) all ranks stop at the same
  step, save a checkpoint and exit with 143, so an interrupted run is never mistaken for a
  finished one (a restart resumes it);
- finish: rank 0 writes ``model.pt`` to $TAU_OUTPUT_DIR and prints the held-out loss.

Runs under torchrun (``launcher: torchrun`` in tau.yaml), or alone as one process.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import taugrid

STOPPED_EXIT_CODE = 143  # 128 + SIGTERM: stopped early, not finished
FEATURES = 16
TRAIN, HELD_OUT = 4096, 1024


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--steps", type=int, default=60, help="last training step")
    p.add_argument("--ckpt-every", type=int, default=10, help="checkpoint every N steps")
    p.add_argument("--log-every", type=int, default=5, help="log metrics every N steps")
    p.add_argument("--batch", type=int, default=64, help="batch size per process")
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--step-time",
        type=float,
        default=0.05,
        help="extra seconds per step (stands in for "
        "a bigger model, so there is time to watch, cancel or kill it)",
    )
    return p.parse_args()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def init_distributed() -> tuple[int, int, torch.device]:
    if "RANK" not in os.environ:  # started without torchrun: a world of one
        os.environ.update(
            {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}
        )
        os.environ.setdefault("MASTER_PORT", str(free_port()))
    backend = os.environ.get("TAU_DIST_BACKEND", "gloo")
    local_rank = int(os.environ["LOCAL_RANK"])
    if backend == "nccl":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        dist.init_process_group(backend=backend, device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group(backend=backend)
    return dist.get_rank(), dist.get_world_size(), device


def make_data(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(TRAIN + HELD_OUT, FEATURES, generator=g)
    w = torch.randn(FEATURES, 1, generator=g) / FEATURES**0.5
    y = torch.sin(x @ w) + 0.1 * (x[:, :1] ** 2) + 0.05 * torch.randn(len(x), 1, generator=g)
    return x, y


def make_model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(FEATURES, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 1)
    )


def batch_indices(step: int, seed: int, rank: int, world: int, batch: int) -> torch.Tensor:
    """This rank's slice of the step's global batch: a function of the step alone."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    idx = torch.randperm(TRAIN, generator=g)[: batch * world]
    return idx[rank * batch : (rank + 1) * batch]


def find_checkpoint(rank: int) -> str | None:
    """The checkpoint rank 0 picked, the same on every rank."""
    picked: list[str | None] = [None]
    if rank == 0:
        ckpt = taugrid.checkpoint.latest()
        picked = [str(ckpt.path) if ckpt is not None else None]
    dist.broadcast_object_list(picked, src=0)
    return picked[0]


def save(step: int, model: nn.Module, opt: torch.optim.Optimizer, rank: int) -> None:
    if rank == 0:
        with taugrid.checkpoint.saving(step) as d:
            state = {"step": step, "model": model.state_dict(), "optimizer": opt.state_dict()}
            torch.save(state, d / "state.pt")
    dist.barrier()  # nobody runs ahead of (or exits before) a checkpoint in progress


def main() -> int:
    args = parse_args()
    torch.set_num_threads(1)
    taugrid.should_stop()  # make sure SIGTERM is caught from here on
    rank, world, device = init_distributed()
    backend = dist.get_backend()
    print(f"rank {rank}/{world} started (backend {backend})", flush=True)

    x, y = make_data(args.seed)
    x_train, y_train = x[:TRAIN].to(device), y[:TRAIN].to(device)
    x_val, y_val = x[TRAIN:].to(device), y[TRAIN:].to(device)
    model = make_model(args.seed).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)

    path, done = find_checkpoint(rank), 0
    if path is not None:
        state = torch.load(Path(path) / "state.pt", map_location=device, weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        done = int(state["step"])
        if rank == 0:
            print(f"resumed from step {done}", flush=True)
    ddp = DistributedDataParallel(
        model, device_ids=[device.index] if device.type == "cuda" else None
    )
    loss_fn = nn.MSELoss()

    step, stopped = done, False
    for step in range(done + 1, args.steps + 1):
        idx = batch_indices(step, args.seed, rank, world, args.batch).to(device)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(ddp(x_train[idx]), y_train[idx])
        loss.backward()  # gradients are averaged across ranks here
        opt.step()
        if args.step_time:
            time.sleep(args.step_time)
        # One collective per step: the mean loss, and whether any rank was told to stop.
        flags = torch.tensor([loss.item(), float(taugrid.should_stop())], device=device)
        dist.all_reduce(flags)
        stopped = bool(flags[1].item() > 0) and step < args.steps  # the last step: done anyway
        if rank == 0 and (step % args.log_every == 0 or stopped):
            taugrid.log(step=step, loss=round(flags[0].item() / world, 6))
        if step % args.ckpt_every == 0 or step == args.steps or stopped:
            save(step, model, opt, rank)
        if stopped:
            break

    if stopped:
        if rank == 0:
            print(f"stopped at step {step} (checkpoint saved); a restart resumes", flush=True)
        dist.destroy_process_group()
        return STOPPED_EXIT_CODE
    if rank == 0:
        with torch.no_grad():
            val = loss_fn(model(x_val), y_val).item()
        taugrid.log(step=step, val_loss=round(val, 6))
        out = Path(os.environ.get("TAU_OUTPUT_DIR", "outputs"))
        out.mkdir(parents=True, exist_ok=True)
        torch.save(model.state_dict(), out / "model.pt")
        print(f"finished at step {step} loss {val:.6f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
