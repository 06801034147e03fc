"""CLI start-up: ``tau --help`` and ``tau status`` against ``kubectl --help``.

Four commands, each run 21 times (after 2 untimed warm-ups each), round-robin so that any
drift of the machine hits all of them alike; the start order rotates every round. A run
is timed from before ``subprocess.run`` to its exit (fork+exec+work+exit, output to
/dev/null). ``tau status`` talks to a local server holding 1,000 finished runs.

Headlines are ratios of medians against ``kubectl --help`` measured in the same run.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench._common import (
    TERMINAL,
    VENV_BIN,
    BenchServer,
    clean_env,
    headline,
    hold_gpu,
    median,
    ms,
    print_headlines,
    submit_body,
    upload_snapshot,
    wait_state,
    write_results,
)

NAME = "cli_startup"
ROUNDS = 21
WARMUP = 2
RUNS = 1000
REAL_RUNS = 20  # the newest runs, the ones `tau status` shows, really ran `true`
KUBECTL = "/usr/bin/kubectl"
TARGET_HELP = 1.2
TARGET_STATUS = 2.5


def populate(srv: BenchServer) -> dict[str, Any]:
    """1,000 terminal runs, made fast.

    Spawning 1,000 processes takes ~100 s on a 2-core machine, so 980 runs of ``true`` are
    submitted asking for the server's one GPU while a ``sleep`` holds it (they queue), then
    cancelled; then the GPU is freed and the last 20 runs of ``true`` really run to
    SUCCEEDED. Every run goes through POST /api/v1/runs with its own Idempotency-Key.
    """
    t0 = time.monotonic()
    api = srv.api()
    digest = upload_snapshot(api)
    holder = hold_gpu(api, digest, srv.home)
    queued_body = submit_body(["true"], digest, srv.home, ["resources.gpus=1", "name=seed"])
    n_queued = RUNS - REAL_RUNS - 1  # the GPU holder is a run too

    def submit_and_cancel(keys: list[str]) -> int:
        c = srv.api()
        try:
            for key in keys:
                rid = c.submit(queued_body, key)["run"]["id"]
                c.cancel(rid)
            return len(keys)
        finally:
            c.close()

    keys = [str(uuid.uuid4()) for _ in range(n_queued)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        done = sum(pool.map(submit_and_cancel, [keys[i::8] for i in range(8)]))
    api.cancel(holder)
    wait_state(api, holder, TERMINAL)
    real_body = submit_body(["true"], digest, srv.home, ["name=status-demo"])
    real = [api.submit(real_body, str(uuid.uuid4()))["run"]["id"] for _ in range(REAL_RUNS)]
    for rid in real:
        wait_state(api, rid, TERMINAL, timeout=60)
    runs = api.request("GET", "/api/v1/runs?limit=1000")["runs"]
    more = api.request("GET", f"/api/v1/runs?limit=1000&cursor={_cursor(runs[-1])}")["runs"]
    states = [r["state"] for r in runs + more]
    api.close()
    assert len(states) == RUNS, len(states)
    assert all(s in TERMINAL for s in states), "not all runs are terminal"
    return {
        "runs": len(states),
        "cancelled_while_queued": done + 1,
        "succeeded": states.count("SUCCEEDED"),
        "seconds": round(time.monotonic() - t0, 1),
    }


def _cursor(run: dict[str, Any]) -> str:
    import urllib.parse

    return urllib.parse.quote(f"{run['created_at']!r}:{run['id']}")


def time_once(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(
        argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{argv} exited {proc.returncode}: {proc.stderr[-500:]!r}")
    return elapsed


def importtime_top(env: dict[str, str], n: int = 10, repeat: int = 3) -> list[dict[str, Any]]:
    """``python -X importtime tau status`` (median of ``repeat`` runs per module): the ``n``
    imports with the largest cumulative time. -X importtime itself slows imports down."""
    per_module: dict[str, list[tuple[int, int]]] = {}
    for _ in range(repeat):
        proc = subprocess.run(
            [str(VENV_BIN / "python"), "-X", "importtime", str(VENV_BIN / "tau"), "status"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            check=True,
        )
        for line in proc.stderr.splitlines():
            if not line.startswith("import time:") or "cumulative" in line:
                continue
            self_us, cum_us, name = line.split(":", 1)[1].split("|")
            per_module.setdefault(name.strip(), []).append((int(self_us), int(cum_us)))
    rows = [
        {
            "module": name,
            "self_us": int(median(s for s, _ in v)),
            "cumulative_us": int(median(c for _, c in v)),
        }
        for name, v in per_module.items()
    ]
    rows.sort(key=lambda r: -r["cumulative_us"])
    return rows[:n]


def main() -> dict[str, Any]:
    with BenchServer(NAME, gpus=1) as srv:
        print(f"{NAME}: populating a server with {RUNS} runs ...", flush=True)
        population = populate(srv)
        env = clean_env(srv.home)
        commands = {
            "kubectl --help": [KUBECTL, "--help"],
            "tau --help": [str(VENV_BIN / "tau"), "--help"],
            "python -c pass": [str(VENV_BIN / "python"), "-c", "pass"],
            "tau status": [str(VENV_BIN / "tau"), "status"],
        }
        names = list(commands)
        for _ in range(WARMUP):
            for name in names:
                time_once(commands[name], env)
        samples: dict[str, list[float]] = {name: [] for name in names}
        for r in range(ROUNDS):
            order = names[r % len(names) :] + names[: r % len(names)]
            for name in order:
                samples[name].append(time_once(commands[name], env))
        top = importtime_top(env)
    med = {name: median(v) for name, v in samples.items()}
    base = med["kubectl --help"]
    r_help = med["tau --help"] / base
    r_status = med["tau status"] / base
    rows = [
        headline(
            "tau --help / kubectl --help",
            round(r_help, 3),
            target=f"<= {TARGET_HELP}",
            ok=r_help <= TARGET_HELP,
        ),
        headline(
            "tau status (1k runs) / kubectl --help",
            round(r_status, 3),
            target=f"<= {TARGET_STATUS}",
            ok=r_status <= TARGET_STATUS,
        ),
    ]
    result = {
        "method": (
            f"median of {ROUNDS} wall-clock runs per command (after {WARMUP} warm-ups), "
            "interleaved round-robin with a rotating start; fork to exit, output to /dev/null"
        ),
        "population": population,
        "median_ms": {name: ms(v) for name, v in med.items()},
        "min_ms": {name: ms(min(v)) for name, v in samples.items()},
        "max_ms": {name: ms(max(v)) for name, v in samples.items()},
        "samples_ms": {name: [ms(x) for x in v] for name, v in samples.items()},
        "ratios": {
            "tau_help_over_kubectl_help": round(r_help, 3),
            "tau_status_over_kubectl_help": round(r_status, 3),
            "python_pass_over_kubectl_help": round(med["python -c pass"] / base, 3),
        },
        "targets": {
            "tau_help_over_kubectl_help": TARGET_HELP,
            "tau_status_over_kubectl_help": TARGET_STATUS,
        },
        "importtime_tau_status_top10": top,
        "headlines": rows,
    }
    path = write_results(NAME, result)
    print(f"{NAME}: medians of {ROUNDS} interleaved runs")
    for name in names:
        print(f"  {name:<16} {ms(med[name]):8.1f} ms")
    print_headlines(rows)
    print("  -X importtime, tau status, top 10 by cumulative time:")
    for row in top:
        print(f"    {row['cumulative_us'] / 1000:7.1f} ms  {row['module']}")
    print(f"  results: {path}")
    return result


if __name__ == "__main__":
    main()
    sys.exit(0)
