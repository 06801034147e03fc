"""How long a training loop is blocked by ``save_async`` against a synchronous ``saving()``,
and how much loop time each save costs in all.

State: 1 GiB, four NumPy float32 arrays of 256 MiB (four bytearrays when NumPy is not
installed), updated in place by the "training loop" after each save call returns.

Baseline (``sync``): ``with saving(step) as d: write_files(d, state)``, the fastest
synchronous path of the SDK (O_DIRECT writes with the hashing overlapped, fsync per file
as soon as it is written); blocked = the whole ``with`` block.

Two loops, each the same on both sides:

* ``update`` ("update at once"): right after the call returns the loop adds 1 to every
  element of the state, in place: the worst case for a snapshot.
* ``step`` ("read, then update"): a training step: a pass that reads every element (the
  forward and backward passes read the parameters), then the in-place update (the
  optimizer writes them). With ``background_copy=True`` the loop calls
  ``job.wait_staged()`` between the two, as the SDK asks.

Phases, each ``ROUNDS`` rounds after one untimed warm-up pair, every round one sync save
and one async save (alternating which goes first) with the same loop:

=================  ===========================================  =======================
phase              async save                                   loop
=================  ===========================================  =======================
copy/update        ``mode="copy"`` (the default for buffers)    update at once
copy/step          ``mode="copy"``                              read, then update
background/step    ``mode="copy", background_copy=True``        read, wait_staged, update
fork/update        ``mode="fork"``                              update at once
fork/step          ``mode="fork"``                              read, then update
=================  ===========================================  =======================

Copy phases come first: a fork leaves every page of this process write-protected until its
next write and splits its huge pages, which would tax a later copy phase (and the staging
buffers are dropped before the fork phases, as in a process that uses only fork mode).

Per save: *blocked* = the time the loop cannot go on: call to return, plus the wait in
``wait_staged`` (sync: the whole save). *Loop time lost* = blocked + how much longer the
loop's reads and update took than the same loop right after a sync save (no save in flight
then; those samples interleave with the async ones): the honest total. The first copy-mode
save, which faults in 1 GiB of fresh staging memory, is reported on its own.

Ratios are taken per round (async / the same round's sync) and reported as their median
with quartiles and extremes; headline: the median of blocked(async) / blocked(sync),
target <= 0.1. Checks on every async save: it completed, its manifest verifies with full
sha256, and the sha256 of each saved file equals the sha256 of that array taken just
before the call, so nothing the loop did after the call reached the checkpoint.
Checkpoints are deleted between runs, untimed (then ``os.sync()`` and a 1 s pause), so no
pruning is counted on either side.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._common import RESULTS_DIR, headline, median, print_headlines, spread, write_results
from taugrid.sdk import _staging

NAME = "checkpoint_async"
PART = 256 << 20
PARTS = 4
TOTAL = PART * PARTS
ROUNDS = 4
TARGET = 0.1
# (phase, mode, background_copy, loop)
PHASES = (
    ("copy/update", "copy", False, "update"),
    ("copy/step", "copy", False, "step"),
    ("background/step", "copy", True, "step"),
    ("fork/update", "fork", False, "update"),
    ("fork/step", "fork", False, "step"),
)


def make_state() -> tuple[list[Any], str]:
    try:
        import numpy as np
    except ImportError:
        return [bytearray(os.urandom(1 << 20)) * (PART >> 20) for _ in range(PARTS)], "bytearray"
    rng = np.random.default_rng(0)
    return [rng.random(PART // 4, dtype=np.float32) for _ in range(PARTS)], "numpy"


def update_in_place(state: list[Any]) -> float:
    """The optimizer's part of a step: writes every byte of the state; its duration."""
    t0 = time.perf_counter()
    for arr in state:
        if isinstance(arr, bytearray):
            view = memoryview(arr)
            for off in range(0, len(arr), 4096):  # one write per page, like a sparse update
                view[off] = (view[off] + 1) & 0xFF
        else:
            arr += 1.0
    return time.perf_counter() - t0


def read_all(state: list[Any]) -> float:
    """The forward/backward part of a step: reads every element; its duration."""
    t0 = time.perf_counter()
    for arr in state:
        if isinstance(arr, bytearray):
            sum(memoryview(arr)[::4096])
        else:
            float(arr.sum())
    return time.perf_counter() - t0


def files_of(state: list[Any]) -> dict[str, Any]:
    return {f"part-{i}.bin": arr for i, arr in enumerate(state)}


def digests(state: list[Any]) -> dict[str, str]:
    return {name: hashlib.sha256(memoryview(a)).hexdigest() for name, a in files_of(state).items()}


def clear(work: Path) -> None:
    """Delete the previous run's checkpoint, flush, and let the disk settle (ext4 with
    ``discard`` here: the deletion's discards would otherwise slow the next timed run,
    which would flatter the async side by slowing the sync baseline)."""
    for p in work.iterdir():
        shutil.rmtree(p, ignore_errors=True)
    os.sync()
    time.sleep(1.0)


def run_sync(work: Path, state: list[Any], step: int, loop: str) -> dict[str, Any]:
    from taugrid.sdk import checkpoint

    t0 = time.perf_counter()
    with checkpoint.saving(step, root=work) as d:
        checkpoint.write_files(d, files_of(state))
    blocked = time.perf_counter() - t0
    ok = checkpoint.verify(work / f"step-{step:010d}") is None
    read_s = read_all(state) if loop == "step" else 0.0  # the loop with no save in flight
    update_s = update_in_place(state)
    return {
        "blocked_s": blocked,
        "to_durable_s": blocked,
        "loop_s": read_s + update_s,
        "read_s": read_s,
        "update_s": update_s,
        "verified": ok,
    }


def run_async(
    work: Path, state: list[Any], step: int, mode: str, background: bool, loop: str
) -> dict[str, Any]:
    from taugrid.sdk import checkpoint

    before = digests(state)  # what the checkpoint must hold
    t0 = time.perf_counter()
    job = checkpoint.save_async(
        step,
        files_of(state),
        root=work,
        mode=mode,  # type: ignore[arg-type]
        background_copy=background,
    )
    call_s = time.perf_counter() - t0
    read_s = read_all(state) if loop == "step" else 0.0
    t1 = time.perf_counter()
    job.wait_staged(timeout=600)
    fence_s = time.perf_counter() - t1
    update_s = update_in_place(state)
    saved = job.wait(timeout=600)
    durable = time.perf_counter() - t0
    return {
        "blocked_s": call_s + fence_s,
        "call_s": call_s,
        "wait_staged_s": fence_s,
        "loop_s": read_s + update_s,
        "read_s": read_s,
        "update_s": update_s,
        "to_durable_s": durable,
        "completed": job.done(),
        "verified": checkpoint.verify(saved.path, full=True) is None,
        "saved_bytes_are_call_time_bytes": {f.path: f.sha256 for f in saved.files} == before,
    }


def run_phase(
    work: Path, state: list[Any], first_step: int, mode: str, background: bool, loop: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """(sync samples, async samples, the warm-up async sample)."""
    syncs: list[dict[str, Any]] = []
    asyncs: list[dict[str, Any]] = []
    warm: dict[str, Any] = {}
    step = first_step
    for rnd in range(ROUNDS + 1):
        for way in ("sync", "async") if rnd % 2 else ("async", "sync"):
            clear(work)
            if way == "sync":
                sample = run_sync(work, state, step, loop)
            else:
                sample = run_async(work, state, step, mode, background, loop)
            step += 1
            sample["round"] = rnd
            if rnd == 0:  # warms up (and creates the staging buffers)
                if way == "async":
                    warm = sample
                continue
            (syncs if way == "sync" else asyncs).append(sample)
    return syncs, asyncs, warm


def summarize(syncs: list[dict[str, Any]], asyncs: list[dict[str, Any]]) -> dict[str, Any]:
    plain_loop = median(s["loop_s"] for s in syncs)  # the loop with no save in flight
    blocked = [a["blocked_s"] / s["blocked_s"] for s, a in zip(syncs, asyncs, strict=True)]
    lost = [
        (a["blocked_s"] + max(0.0, a["loop_s"] - plain_loop)) / s["blocked_s"]
        for s, a in zip(syncs, asyncs, strict=True)
    ]
    return {
        "median_blocked_s": {
            "sync": round(median(s["blocked_s"] for s in syncs), 4),
            "async": round(median(a["blocked_s"] for a in asyncs), 4),
        },
        "median_loop_s": {
            "after_sync_no_save_in_flight": round(plain_loop, 4),
            "with_async_save_in_flight": round(median(a["loop_s"] for a in asyncs), 4),
        },
        "median_to_durable_s": {
            "sync": round(median(s["to_durable_s"] for s in syncs), 3),
            "async": round(median(a["to_durable_s"] for a in asyncs), 3),
        },
        "blocked_over_sync": spread(blocked, 4),
        "loop_time_lost_over_sync": spread(lost, 3),
        "checks_passed": all(
            a["completed"] and a["verified"] and a["saved_bytes_are_call_time_bytes"]
            for a in asyncs
        )
        and all(s["verified"] for s in syncs),
    }


def main() -> dict[str, Any]:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="ckpt-async-", dir=RESULTS_DIR))
    os.environ["TAU_CHECKPOINT_KEEP"] = "1000"  # deleted by this benchmark, untimed
    phases: dict[str, dict[str, Any]] = {}
    try:
        state, kind = make_state()
        print(f"{NAME}: 1 GiB of {kind} state; sync vs save_async, {ROUNDS} rounds per phase")
        step = 0
        first_copy: dict[str, Any] = {}
        for name, mode, background, loop in PHASES:
            if mode == "fork":
                _staging.keep({})  # a process that only forks has no staging buffers
            syncs, asyncs, warm = run_phase(work, state, step, mode, background, loop)
            step += 2 * (ROUNDS + 1)
            if not first_copy and mode == "copy":
                first_copy = warm
            phases[name] = {
                "mode": mode,
                "background_copy": background,
                "loop": loop,
                **summarize(syncs, asyncs),
                "samples": {"sync": syncs, "async": asyncs},
            }
            p = phases[name]
            print(
                f"  {name:<16} blocked: sync {p['median_blocked_s']['sync'] * 1000:7.1f} ms, "
                f"async {p['median_blocked_s']['async'] * 1000:7.1f} ms -> "
                f"{p['blocked_over_sync']['median']:.3f} (range {p['blocked_over_sync']['min']:.3f}"
                f"-{p['blocked_over_sync']['max']:.3f}); lost "
                f"{p['loop_time_lost_over_sync']['median']:.3f}; load {os.getloadavg()[0]:.2f}",
                flush=True,
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
        _staging.keep({})
    checks_ok = all(p["checks_passed"] for p in phases.values())
    targeted = ("copy/update", "background/step", "fork/update")
    rows = [
        headline(
            f"async/sync blocked ({name})",
            phases[name]["blocked_over_sync"]["median"],
            target=f"<= {TARGET}",
            ok=phases[name]["blocked_over_sync"]["median"] <= TARGET and checks_ok,
        )
        for name in targeted
    ] + [
        headline(f"async/sync loop time lost ({name})", p["loop_time_lost_over_sync"]["median"])
        for name, p in phases.items()
    ]
    result = {
        "method": (
            f"{len(PHASES)} phases (copy/update, copy/step, background/step, fork/update, "
            f"fork/step), each {ROUNDS} rounds (after 1 warm-up) of one sync saving()+"
            "write_files and one save_async, alternating first; blocked = call to return + "
            "wait_staged; lost = blocked + the loop's extra time over the loop right after a "
            "sync save; ratios per round (async / the same round's sync), median and spread"
        ),
        "state": kind,
        "bytes": TOTAL,
        "first_copy_mode_save_blocked_s": round(first_copy.get("blocked_s", float("nan")), 3),
        "phases": phases,
        "all_checks_passed": checks_ok,
        "targets": {"blocked_over_sync": TARGET},
        "headlines": rows,
    }
    path = write_results(NAME, result)
    print(
        f"  first copy-mode save (fresh staging memory) blocked "
        f"{result['first_copy_mode_save_blocked_s']:.3f} s; all checks passed: {checks_ok}"
    )
    print_headlines(rows)
    print(f"  results: {path}")
    return result


if __name__ == "__main__":
    main()
    sys.exit(0)
