"""GPU fault to resumed: from an injected Xid 79 on the GPU a checkpointing run holds, to
that run's first step on another GPU after resuming from its checkpoint, split by stage,
p50 over 5 trials (local mode, 4 declared GPUs, no backoff: a hardware restart waits none).

The workload is crash_resume's (a 1 MiB checkpoint every step, one line per attempt at its
first step); it stops at the SDK's stop signal. Each trial injects the fault on the GPU
the current attempt holds (``POST /admin/health/inject``, which returns once the GPU is
out and the stop is asked for), waits for the next attempt's line, and returns the GPU to
service for the next trial (the breaker is opened wide for the benchmark).

Stages, from the records: decide (the inject call: classify, quarantine committed, stop
asked), stop (the attempt's end: SIGTERM, the workload saves and exits), re-admit (the
next attempt admitted on a healthy GPU), start (its process started) and first step (the
user's imports and checkpoint load, then one step).

Baseline, in the same process and on the same server: the same workload submitted fresh,
submit to its first step. The anchor is the ~350 s a default Kubernetes node loss takes
to move a pod (the node controller's 40 s grace, then the 300 s default toleration).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from bench._common import (
    TERMINAL,
    BenchServer,
    headline,
    median,
    ms,
    print_headlines,
    submit_body,
    upload_snapshot,
    wait_state,
    write_results,
)
from bench.crash_resume import WORKLOAD, _wait_lines

NAME = "fault_resume"
TRIALS = 5
TARGET_S = 10.0
K8S_NODE_LOSS_S = 350.0
STAGES = ("decide", "stop", "readmit", "start", "first_step")


class FaultServer(BenchServer):
    def server_args(self) -> list[str]:
        return [*super().server_args(), "--health-breaker", "100%/1s"]


def _attempt(api: Any, run_id: str, k: int, field: str, timeout: float = 60.0) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        attempts = api.get_run(run_id)["attempt_list"]
        if len(attempts) > k and attempts[k].get(field) is not None:
            return float(attempts[k][field])
        time.sleep(0.01)
    raise TimeoutError(f"attempt {k} has no {field} after {timeout:.0f}s")


def fresh_start(api: Any, digest: str, home: Path) -> float:
    """Submit to first step of the same workload, a fresh run on the same server."""
    body = submit_body(
        [sys.executable, "-c", WORKLOAD], digest, home, ["name=fresh", "resources.gpus=1"]
    )
    t = time.time()
    run_id = api.submit(body, f"fresh-{t}")["run"]["id"]
    line = _wait_lines(home / "runs" / run_id / "outputs" / "attempts.jsonl", 1)[0]
    api.cancel(run_id)
    wait_state(api, run_id, TERMINAL, timeout=60)
    return float(line["first_step"]) - t


def main() -> dict[str, Any]:
    trials: list[dict[str, Any]] = []
    errors: list[str] = []
    with FaultServer(NAME, gpus=4) as srv:
        api = srv.api()
        digest = upload_snapshot(api)
        body = submit_body(
            [sys.executable, "-c", WORKLOAD], digest, srv.home, ["name=faulty", "resources.gpus=1"]
        )
        run_id = api.submit(body, "fault-resume")["run"]["id"]
        marks = srv.home / "runs" / run_id / "outputs" / "attempts.jsonl"
        print(f"{NAME}: {TRIALS} x Xid 79 on the GPU a running workload holds ...", flush=True)
        for k in range(TRIALS):
            _wait_lines(marks, k + 1)
            time.sleep(0.3)  # a few checkpoints
            (gpu,) = api.get_run(run_id)["attempt_list"][k]["placement"]["gpus"]
            t0 = time.time()
            api.request("POST", "/api/v1/admin/health/inject", json_body={"gpu": gpu, "xid": 79})
            decided = time.time()
            nxt = _wait_lines(marks, k + 2)[k + 1]
            ended = _attempt(api, run_id, k, "finished_at")
            admitted = _attempt(api, run_id, k + 1, "created_at")
            started = _attempt(api, run_id, k + 1, "started_at")
            stages = {
                "decide": decided - t0,
                "stop": ended - decided,
                "readmit": admitted - ended,
                "start": started - admitted,
                "first_step": float(nxt["first_step"]) - started,
            }
            (moved,) = api.get_run(run_id)["attempt_list"][k + 1]["placement"]["gpus"]
            trials.append(
                {
                    "gpu": gpu,
                    "moved_to": moved,
                    "total_s": float(nxt["first_step"]) - t0,
                    "stages_s": stages,
                    "resumed_at_step": nxt["step"],
                    "resume_from": nxt["resume_from"],
                }
            )
            if moved == gpu:
                errors.append(f"trial {k}: resumed on the faulty GPU {gpu}")
            if not nxt["resume_from"] or nxt["step"] == 0:
                errors.append(f"trial {k}: attempt started from scratch: {nxt}")
            api.request("POST", "/api/v1/admin/health/return", json_body={"gpu": gpu})
        api.cancel(run_id)
        wait_state(api, run_id, TERMINAL, timeout=60)
        fresh = [fresh_start(api, digest, srv.home) for _ in range(3)]
        api.close()
    total = median([t["total_s"] for t in trials])
    base = median(fresh)
    stage_p50 = {s: ms(median([t["stages_s"][s] for t in trials])) for s in STAGES}
    result = {
        "method": __doc__.split("\n\n")[1].replace("\n", " "),
        "trials": trials,
        "fault_to_resumed_ms": {"p50": ms(total), "max": ms(max(t["total_s"] for t in trials))},
        "stages_p50_ms": stage_p50,
        "fresh_submit_to_first_step_ms": {"p50": ms(base), "samples": [ms(f) for f in fresh]},
        "errors": errors,
    }
    rows = [
        headline(
            "fault to resumed on another GPU p50 (s)",
            round(total, 3),
            target=f"<= {TARGET_S}",
            ok=total <= TARGET_S and not errors,
        ),
        headline(
            "  / default Kubernetes node loss (350 s)",
            round(total / K8S_NODE_LOSS_S, 4),
            target="<= 0.03",
            ok=total / K8S_NODE_LOSS_S <= 0.03,
        ),
        headline("  / a fresh submit to first step", round(total / base, 2)),
    ]
    result["headlines"] = rows
    path = write_results(NAME, result)
    print("  stages p50 (ms): " + ", ".join(f"{s} {v:.0f}" for s, v in stage_p50.items()))
    print(f"  fresh submit to first step {ms(base):.0f} ms; errors: {errors or 'none'}")
    print_headlines(rows)
    print(f"  results: {path}")
    print(json.dumps(stage_p50))
    return result


if __name__ == "__main__":
    main()
