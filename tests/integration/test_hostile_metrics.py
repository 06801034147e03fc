"""A workload writes its metrics file, so the server must survive whatever is in it:
lines of the wrong shape, JSON nested too deep to parse, the file swapped for a
directory. Before the fix any of these made every engine pass fail, so no run on the
server advanced, and `tau status` answered 500 for the whole workspace."""

from __future__ import annotations

import sys
import time

from tauproc import Tau, write_spec

EVIL = r"""
import json, os, shutil, time
path = os.environ["TAU_METRICS_FILE"]
with open(path, "a") as f:
    f.write('{"time": [1], "values": {"a": 1}}\n')
    f.write('{"step": "x", "time": 1.0, "values": {"a": 1}}\n')
    f.write('{"step": 1, "time": 2.0, "values": [1, 2]}\n')
    f.write("[" * 100000 + "]" * 100000 + "\n")
    f.write('{"step": 7, "time": 3.0, "values": {"good": 0.5}}\n')
    f.write("[1, 2, 3]\n")
open(os.environ["TAU_OUTPUT_DIR"] + "/started", "w").close()
time.sleep(2)
os.unlink(path)
os.mkdir(path)  # the next read must not raise IsADirectoryError in the engine
time.sleep(2)
"""


def test_hostile_metrics_stall_nothing(tau: Tau) -> None:
    tau.start_server()
    (tau.cwd / "evil.py").write_text(EVIL)
    write_spec(tau.cwd, f"name: evil\ncommand: [{sys.executable!r}, evil.py]\n")
    evil = tau.json("run")["run"]["id"]
    tau.wait_state(evil, {"RUNNING"})
    write_spec(tau.cwd, "name: bystander\ncommand: 'echo fine'\n", "ok.yaml")
    time.sleep(1)
    other = tau.json("run", "ok.yaml")["run"]["id"]
    assert tau.wait_state(other, {"SUCCEEDED", "FAILED"}, timeout=20)["state"] == "SUCCEEDED"
    listed = {r["id"]: r for r in tau.json("list")["runs"]}  # no 500 for the listing
    assert evil in listed
    done = tau.wait_state(evil, {"SUCCEEDED", "FAILED"}, timeout=30)
    assert done["state"] == "SUCCEEDED", done["events"]
    assert done["metrics_last"]["step"] == 7
    assert done["metrics_last"]["values"] == {"good": 0.5}
    series = tau.json("metrics", evil)["series"]  # the directory is read as no metrics
    assert series == []
