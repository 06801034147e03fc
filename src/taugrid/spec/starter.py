"""The commented starter ``tau.yaml`` written by ``tau init``.

Convention kept by the tests: an optional setting is a line ``# key: value  # why``, so
removing the leading ``# `` of any such line still gives a valid spec.
"""

from __future__ import annotations

STARTER_TAU_YAML = """\
# tau.yaml describes one workload. Full reference: `tau schema`.
# Optional settings are commented out; remove the leading "# " to use one.

# name: my-run                  # run name (DNS-1123); default: this directory's name
# workspace: default            # workspace the run belongs to
# queue: default                # queue in the workspace
# priority: normal              # priority class from the platform policy
# experiment: {name: my-experiment, group: baseline, tags: {lr: "3e-4"}}

workdir: .                      # code snapshot root, relative to this file
# exclude: ["data/", "*.ckpt"]  # left out of the snapshot, besides .gitignore and .tauignore
# image: ghcr.io/acme/train:1.4 # container image (cluster mode)
# setup: pip install -r requirements.txt  # shell command run before `command`

command: python train.py        # a string runs in a shell; a list is argv: [python, train.py]
# env: {LR: "3e-4"}             # environment variables; quote numbers; use as ${LR}
# secrets: {HF_TOKEN: hf/token} # env name -> secret reference, never stored in clear

resources:                      # per node
  gpus: 0
  # gpu_type: h100              # GPU type (flavor) from the platform policy
  # cpus: 4                     # CPU cores
  # memory: 16Gi                # Kubernetes quantity: 512Mi, 16Gi, 1G
# nodes: 1                      # number of nodes
# launcher: command             # command | torchrun | ray

# checkpoint: {keep: 3}         # keep the newest 3 checkpoints in $TAU_CHECKPOINT_DIR
# restart: {max: 3, on: [error, preemption, hardware], backoff: 30s}
# stop_grace: 60s               # SIGTERM, then this long, then SIGKILL
# timeout: 24h                  # stop the run after this long
# outputs: [outputs/]           # paths collected as artifacts
"""

# Written beside the starter tau.yaml by `tau init` when there is no train.py, so that the
# starter runs as it is (`tau run --wait`). Standard library and the SDK only.
STARTER_TRAIN_PY = '''\
"""A starter workload written by `tau init`: replace it with your own training script.

It shows what TauGrid gives a run: metrics (taugrid.log, see `tau metrics`), crash-safe
checkpoints that a restarted or resumed run continues from, and the stop signal that a
cancel, preemption or timeout sends (taugrid.should_stop).
"""

import json
import os
import time

import taugrid
from taugrid import checkpoint

STEPS = int(os.environ.get("STEPS", "20"))

last = checkpoint.latest()  # None on a fresh start
state = json.loads((last.path / "state.json").read_text()) if last else {"step": 0, "loss": 1.0}
print(f"starting at step {state['step']}" + (f" (resumed from {last.path})" if last else ""))

for step in range(state["step"], STEPS):
    state = {"step": step + 1, "loss": state["loss"] * 0.9}  # stands in for a training step
    taugrid.log(step, loss=state["loss"])
    if step % 5 == 4 or taugrid.should_stop():
        with checkpoint.saving(step) as d:
            (d / "state.json").write_text(json.dumps(state))
    if taugrid.should_stop():
        print("stop requested: checkpoint saved, exiting")
        break
    time.sleep(0.1)

out = os.environ.get("TAU_OUTPUT_DIR", ".")
with open(os.path.join(out, "result.json"), "w") as f:  # collected as an artifact
    json.dump(state, f)
print(f"done: loss {state['loss']:.4f} after {state['step']} steps")
'''
