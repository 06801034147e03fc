"""Real GPUs through NVML: only on a machine with an NVIDIA driver (`pytest -m gpu`).

CI has no GPU, so these are deselected there by the `gpu` marker rather than skipped;
docs/benchmarks.md records where and when they last ran.
"""

from __future__ import annotations

import json

import pytest
from tauproc import Tau

from taugrid.executors.local.gpus import NvmlGpus, short_gpu_type

pytestmark = pytest.mark.gpu

CUDA_PROBE = (
    "import ctypes, os\n"
    "cuda = ctypes.CDLL('libcuda.so.1')\n"
    "assert cuda.cuInit(0) == 0\n"
    "n = ctypes.c_int()\n"
    "cuda.cuDeviceGetCount(ctypes.byref(n))\n"
    "name = ctypes.create_string_buffer(100)\n"
    "dev = ctypes.c_int()\n"
    "cuda.cuDeviceGet(ctypes.byref(dev), 0)\n"
    "cuda.cuDeviceGetName(name, 100, dev)\n"
    "print('CUDA_VISIBLE_DEVICES=' + os.environ['CUDA_VISIBLE_DEVICES'], 'devices', n.value,"
    " name.value.decode())\n"
)


def test_nvml_inventory_placement_and_isolation(tau: Tau) -> None:
    gpus = NvmlGpus().gpus()
    assert gpus, "NVML found no GPU"
    print("NVML:", gpus)
    kind = short_gpu_type(gpus[0].name)
    tau.start_server()  # no --gpus: the inventory comes from NVML
    (queue,) = tau.json("queues")["queues"]
    assert queue["quota"]["local"]["gpu"] == len(gpus)

    proc = tau(
        "run",
        "--wait",
        "--name",
        "cuda",
        "--gpus",
        "1",
        "--set",
        f"resources.gpu_type={kind}",
        "--",
        "python3",
        "-c",
        CUDA_PROBE,
    )
    assert proc.returncode == 0, proc.stderr
    log = tau("logs", "cuda", check=True).stdout
    print(log)
    assert f"CUDA_VISIBLE_DEVICES={gpus[0].index} devices 1" in log
    placement = tau.json("status", "cuda")["attempt_list"][0]["placement"]
    assert placement["gpus"] == [gpus[0].index]

    too_many = tau("run", "--gpus", str(len(gpus) + 1), "--", "true")
    assert too_many.returncode == 8, too_many.stderr

    # Never two runs on one GPU: with every GPU taken, the next run waits.
    holders = [tau.json("run", "--gpus", "1", "--", "sleep", "3")["run"]["id"] for _ in gpus]
    waiter = tau.json("run", "--gpus", "1", "--", "true")["run"]["id"]
    for h in holders:
        tau.wait_state(h, {"RUNNING"})
    assert tau.json("status", waiter)["state"] == "QUEUED"
    done = tau.wait_state(waiter, {"SUCCEEDED"}, timeout=60)
    starts = [tau.json("status", h)["finished_at"] for h in holders]
    assert done["started_at"] >= min(starts)
    print(json.dumps({"gpus": [g.name for g in gpus], "gpu_type": kind}))
