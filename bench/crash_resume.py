"""Crash to resumed: from ``kill -9`` of a running workload to its first step after it was
restarted from its last good checkpoint (``restart: {backoff: 0s}``), p50 over 10 trials.

The workload (plain Python and the SDK) saves a 1 MiB checkpoint every step (20 steps/s)
and appends one line per attempt to a file in TAU_OUTPUT_DIR when it takes its first step:
its pid, the time it started executing (``t0``, after the interpreter started), when it
had loaded its checkpoint (``ready``) and when it took its first step. The benchmark waits
for an attempt's line, lets it save a few checkpoints, ``kill -9``s the workload process
(not its supervisor) at T, and waits for the next attempt's line.

- crash to resumed = first step of the new attempt - T;
- the user's own load time = ready - t0 of the new attempt (imports and checkpoint load,
  which a bigger model makes longer); the headline excludes it, as the issue asks;
- the new attempt must start at the step after the newest checkpoint (not from zero).

Baseline, in the same process: the same workload started with ``subprocess.Popen`` to its
first step (a fresh start, no server), so the ratio shows what the restart path adds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._common import (
    TERMINAL,
    BenchServer,
    headline,
    median,
    ms,
    percentile,
    print_headlines,
    submit_body,
    upload_snapshot,
    wait_state,
    write_results,
)

NAME = "crash_resume"
TRIALS = 10
TARGET_S = 5.0

WORKLOAD = """\
import time
t0 = time.time()
import json, os, taugrid
ck = taugrid.checkpoint.latest()
start = ck.step + 1 if ck else 0
ready = time.time()
out = os.path.join(os.environ.get("TAU_OUTPUT_DIR", "."), "attempts.jsonl")
state = os.urandom(1 << 20)
step = start
while not taugrid.should_stop():
    if step == start:
        line = {"attempt": os.environ.get("TAU_ATTEMPT"), "pid": os.getpid(), "t0": t0,
                "ready": ready, "first_step": time.time(), "step": step,
                "resume_from": os.environ.get("TAU_RESUME_FROM")}
        with open(out, "a") as f:
            f.write(json.dumps(line) + "\\n")
    with taugrid.checkpoint.saving(step) as d:
        (d / "state.bin").write_bytes(state)
    step += 1
    if os.environ.get("BENCH_ONE_STEP"):
        break
    time.sleep(0.05)
"""


def _lines(path: Path) -> list[dict[str, Any]]:
    try:
        return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    except FileNotFoundError:
        return []


def _wait_lines(path: Path, n: int, timeout: float = 60.0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = _lines(path)
        if len(lines) >= n:
            return lines
        time.sleep(0.005)
    raise TimeoutError(f"attempt {n - 1} did not take a step in {timeout:.0f}s")


def popen_baseline(rounds: int = 5) -> list[float]:
    """Seconds from Popen of the workload to its first step (fresh start, no server)."""
    out = []
    for _ in range(rounds):
        with tempfile.TemporaryDirectory() as tmp:
            env = {
                **os.environ,
                "TAU_CHECKPOINT_DIR": tmp,
                "TAU_OUTPUT_DIR": tmp,
                "BENCH_ONE_STEP": "1",
            }
            t = time.time()
            subprocess.run([sys.executable, "-c", WORKLOAD], env=env, check=True)
            out.append(_lines(Path(tmp) / "attempts.jsonl")[0]["first_step"] - t)
    return out


def main() -> dict[str, Any]:
    trials: list[dict[str, Any]] = []
    errors: list[str] = []
    with BenchServer(NAME) as srv:
        api = srv.api()
        digest = upload_snapshot(api)
        body = submit_body(
            [sys.executable, "-c", WORKLOAD],
            digest,
            srv.home,
            [
                "name=crashy",
                f"restart.max={TRIALS + 5}",
                "restart.on=[error]",
                "restart.backoff=0s",
            ],
        )
        run_id = api.submit(body, "crash-resume")["run"]["id"]
        marks = srv.home / "runs" / run_id / "outputs" / "attempts.jsonl"
        print(f"{NAME}: {TRIALS} x kill -9 of a running workload ...", flush=True)
        for k in range(TRIALS):
            lines = _wait_lines(marks, k + 1)
            time.sleep(0.3)  # a few checkpoints
            victim = lines[k]["pid"]
            t_kill = time.time()
            os.kill(victim, signal.SIGKILL)
            nxt = _wait_lines(marks, k + 2)[k + 1]
            ckpts = sorted((srv.home / "runs" / run_id / "checkpoints").glob("step-*"))
            load = nxt["ready"] - nxt["t0"]
            total = nxt["first_step"] - t_kill
            trials.append(
                {
                    "attempt": int(nxt["attempt"]),
                    "crash_to_resumed_s": total,
                    "user_load_s": load,
                    "excluding_user_load_s": total - load,
                    "resumed_at_step": nxt["step"],
                    "resume_from": nxt["resume_from"],
                }
            )
            if not nxt["resume_from"] or nxt["step"] == 0:
                errors.append(f"trial {k}: attempt started from scratch: {nxt}")
            if ckpts and int(ckpts[0].name.split("-")[1]) > nxt["step"]:
                errors.append(f"trial {k}: resumed at {nxt['step']} before {ckpts[0].name}")
        api.cancel(run_id)
        wait_state(api, run_id, TERMINAL, timeout=60)
        run = api.get_run(run_id)
        api.close()
    base = popen_baseline()
    excl = [t["excluding_user_load_s"] for t in trials]
    total = [t["crash_to_resumed_s"] for t in trials]
    p50 = median(excl)
    result = {
        "method": __doc__.split("\n\n")[1].replace("\n", " "),
        "trials": trials,
        "attempts_recorded": run["attempts"],
        "crash_to_resumed_excluding_user_load_ms": {
            "p50": ms(p50),
            "p90": ms(percentile(excl, 90)),
            "max": ms(max(excl)),
        },
        "crash_to_resumed_total_ms": {"p50": ms(median(total)), "max": ms(max(total))},
        "popen_to_first_step_ms": {"p50": ms(median(base)), "samples": [ms(b) for b in base]},
        "errors": errors,
    }
    rows = [
        headline(
            "crash to resumed p50, excl. user load (s)",
            round(p50, 3),
            target=f"<= {TARGET_S}",
            ok=p50 <= TARGET_S and not errors,
        ),
        headline("  same / Popen to first step", round(p50 / median(base), 2)),
    ]
    result["headlines"] = rows
    path = write_results(NAME, result)
    print(
        f"  p50 {ms(p50):.0f} ms excl. user load ({ms(median(total)):.0f} ms total); "
        f"Popen to first step {ms(median(base)):.0f} ms; every resume continued from its "
        f"newest checkpoint: {not errors}"
    )
    if errors:
        print(f"  ERRORS: {errors}")
    print_headlines(rows)
    print(f"  results: {path}")
    return result


if __name__ == "__main__":
    main()
