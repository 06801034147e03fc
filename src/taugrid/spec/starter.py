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
