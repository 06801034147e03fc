"""The kind demo's workload: a step a few seconds long, a checkpoint and a metric each."""

import os
import time

import taugrid

steps = int(os.environ.get("STEPS", "30"))
pause = float(os.environ.get("STEP_SECONDS", "2"))
start = 0
latest = taugrid.checkpoint.latest()
if latest is not None:
    start = latest.step
    print(f"resumed from step {start} ({latest.path})", flush=True)
print(f"run {os.environ.get('TAU_RUN_ID')} attempt {os.environ.get('TAU_ATTEMPT')}", flush=True)
for step in range(start + 1, steps + 1):
    if taugrid.should_stop():  # SIGTERM arrived: a cancel or a preemption
        print(f"stopping at step {step - 1}", flush=True)
        break
    time.sleep(pause)
    with taugrid.checkpoint.saving(step) as d:
        (d / "state.txt").write_text(f"{step}\n")
    taugrid.log(step=step, value=step * step)
    print(f"step {step}/{steps}", flush=True)
out = os.environ.get("TAU_OUTPUT_DIR")
if out:
    with open(os.path.join(out, "done.txt"), "w") as f:
        f.write("ok\n")
