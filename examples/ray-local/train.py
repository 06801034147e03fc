"""A tiny Ray job: tasks square numbers on the run's own Ray cluster.

Run by ``launcher: ray`` (tau.yaml): TauGrid starts a single-node Ray cluster for the
run and submits ``python train.py`` to it as a job, with the run's environment
(``TAU_RUN_ID``, ``TAU_CHECKPOINT_DIR``, the spec's ``env``, ...) in the job's runtime
env, so every Ray task sees it too. The result is a checkpoint through the SDK; a
resumed run (``tau resume``) starts from it and squares the next numbers.
"""

from __future__ import annotations

import json
import os
import sys

import ray

import taugrid


@ray.remote
def square(i: int) -> dict[str, object]:
    """One task: its number squared, and what the task sees of the run."""
    return {
        "i": i,
        "square": i * i,
        "run": os.environ.get("TAU_RUN_ID"),
        "attempt": os.environ.get("TAU_ATTEMPT"),
    }


def main() -> int:
    ray.init()  # RAY_ADDRESS (set by Ray's job): the run's own cluster
    previous = taugrid.checkpoint.latest()
    start = 0
    if previous is not None:
        start = json.loads((previous.path / "state.json").read_text())["next"]
        print(f"resumed from checkpoint step {previous.step}: starting at {start}")
    count = int(os.environ.get("SQUARES", "8"))
    results = ray.get([square.remote(i) for i in range(start, start + count)])
    for r in results:
        print(f"task {r['i']}: {r['square']} (run {r['run']}, attempt {r['attempt']})")
    total = sum(int(str(r["square"])) for r in results)
    print(f"sum of squares {start}..{start + count - 1}: {total}")
    with taugrid.checkpoint.saving(start + count) as d:
        (d / "state.json").write_text(json.dumps({"next": start + count, "sum": total}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
