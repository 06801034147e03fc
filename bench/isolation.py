"""The cost of isolation: submit -> RUNNING with and without the workload sandbox.

Two private servers run side by side in this process's care, one with ``--isolation
none`` and one with ``--isolation sandbox`` (bubblewrap; as root, with the uid drop), and
get the same workload, ``sh -c 'date +%s.%N > $TAU_OUTPUT_DIR/t0; sleep 0.2'``, in
interleaved rounds (the order alternates each round, so drift hits both alike). One run
at a time: the next is submitted only once the previous one is terminal, so this is
latency on an idle server, not queueing.

Per run, from ``time.time()`` just before the POST:

- **submit -> RUNNING**, as the user sees it: the first ``GET /runs/{id}`` (polled every
  5 ms) that answers RUNNING (or later). Headline: p50(sandbox) - p50(none), target at
  most +50 ms.
- submit -> the workload's first command: the ``date`` it runs first, read back from its
  output file. Inside a sandbox this includes bubblewrap's mounts, which a RUNNING
  answer may precede by a few ms (bwrap reports the sandbox's pid before it mounts).

Skipped (exit 0 with a note) where bubblewrap is missing.
"""

from __future__ import annotations

import shutil
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from bench._common import (
    TERMINAL,
    Api,
    BenchServer,
    headline,
    median,
    ms,
    percentile,
    print_headlines,
    submit_body,
    upload_snapshot,
    write_results,
)

NAME = "isolation"
ROUNDS = 60
WARMUP = 3
POLL_S = 0.005
TARGET_DIFF_MS = 50.0
MODES = ("none", "sandbox")
WORKLOAD = ["sh", "-c", "date +%s.%N > $TAU_OUTPUT_DIR/t0; sleep 0.2"]


class IsolatedServer(BenchServer):
    """BenchServer started with ``--isolation MODE``."""

    def __init__(self, name: str, isolation: str) -> None:
        super().__init__(name)
        self.isolation = isolation

    def server_args(self) -> list[str]:
        return ["--isolation", self.isolation]


def one_run(api: Api, body: dict[str, Any], home: Path) -> dict[str, float]:
    """Submit, poll until RUNNING is answered, wait for the end; the times in seconds."""
    sent = time.time()
    run_id = api.submit(body, str(uuid.uuid4()))["run"]["id"]
    running_at = None
    while True:
        run = api.get_run(run_id)
        if running_at is None and run["state"] in ("RUNNING", *TERMINAL):
            running_at = time.time()
        if run["state"] in TERMINAL:
            break
        time.sleep(POLL_S)
    if run["state"] != "SUCCEEDED":
        raise RuntimeError(f"run {run_id} ended {run['state']}: {run.get('message')}")
    first_command = float((home / "runs" / run_id / "outputs" / "t0").read_text())
    assert running_at is not None
    return {
        "running": running_at - sent,
        "first_command": first_command - sent,
        "started_at": run["started_at"] - sent,
    }


def summary(values: list[float]) -> dict[str, float]:
    return {
        "p50": ms(median(values)),
        "p90": ms(percentile(values, 90)),
        "p99": ms(percentile(values, 99)),
        "min": ms(min(values)),
        "max": ms(max(values)),
    }


def main() -> dict[str, Any]:
    if shutil.which("bwrap") is None:
        print(f"{NAME}: skipped, bubblewrap (bwrap) is not installed", flush=True)
        write_results(NAME, {"skipped": "bwrap is not installed", "headlines": []})
        return {}
    print(f"{NAME}: {ROUNDS} interleaved rounds, --isolation none vs sandbox ...", flush=True)
    samples: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
    with (
        IsolatedServer(f"{NAME}-none", "none") as plain,
        IsolatedServer(f"{NAME}-sandbox", "sandbox") as boxed,
    ):
        servers = {"none": plain, "sandbox": boxed}
        apis = {m: s.api() for m, s in servers.items()}
        bodies = {}
        for mode, srv in servers.items():
            digest = upload_snapshot(apis[mode])
            bodies[mode] = submit_body(WORKLOAD, digest, srv.home, [f"name=iso-{mode}"])
        for i in range(WARMUP + ROUNDS):
            order = MODES if i % 2 == 0 else MODES[::-1]
            for mode in order:
                times = one_run(apis[mode], bodies[mode], servers[mode].home)
                if i >= WARMUP:
                    samples[mode].append(times)
        for api in apis.values():
            api.close()
        boxed_uid = _workload_uid(boxed)
    stats = {
        mode: {key: summary([s[key] for s in samples[mode]]) for key in samples[mode][0]}
        for mode in MODES
    }
    diff = stats["sandbox"]["running"]["p50"] - stats["none"]["running"]["p50"]
    diff_first = stats["sandbox"]["first_command"]["p50"] - stats["none"]["first_command"]["p50"]
    rows = [
        headline(
            "submit->RUNNING p50, sandbox - none, ms",
            round(diff, 2),
            target=f"<= +{TARGET_DIFF_MS:.0f} ms",
            ok=diff <= TARGET_DIFF_MS,
        ),
        headline("submit->first command p50, sandbox - none, ms", round(diff_first, 2)),
        headline("submit->RUNNING p50 without isolation, ms", stats["none"]["running"]["p50"]),
    ]
    result = {
        "rounds": ROUNDS,
        "warmup_rounds_discarded": WARMUP,
        "workload": WORKLOAD,
        "sandbox_workload_uid": boxed_uid,
        "ms": stats,
        "diff_p50_ms": {"running": round(diff, 2), "first_command": round(diff_first, 2)},
        "targets": {"diff_p50_ms": TARGET_DIFF_MS},
        "samples_s": samples,
        "headlines": rows,
    }
    path = write_results(NAME, result)
    for mode in MODES:
        r, f = stats[mode]["running"], stats[mode]["first_command"]
        print(
            f"  {mode:<8} submit->RUNNING p50 {r['p50']:.1f} ms  p99 {r['p99']:.1f} ms;  "
            f"submit->first command p50 {f['p50']:.1f} ms  p99 {f['p99']:.1f} ms"
        )
    print_headlines(rows)
    print(f"  results: {path}")
    return result


def _workload_uid(srv: BenchServer) -> int | None:
    """The uid the sandboxed runs' files belong to (None when the server is not root)."""
    for outputs in srv.home.glob("runs/*/outputs"):
        uid = outputs.stat().st_uid
        return uid if uid != 0 else None
    return None


if __name__ == "__main__":
    main()
    sys.exit(0)
