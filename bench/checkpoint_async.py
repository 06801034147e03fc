"""How long a training loop is blocked by ``save_async`` against a synchronous ``saving()``.

State: 1 GiB, four NumPy float32 arrays of 256 MiB (four bytearrays when NumPy is not
installed), updated in place by the "training loop" right after each save call returns.

* sync (the baseline): ``with saving(step) as d: write_files(d, state)``, the fastest
  synchronous path of the SDK (O_DIRECT writes with the hashing overlapped, fsync per file
  as soon as it is written); blocked = the whole ``with`` block.
* async, ``mode="copy"`` (the default for buffers) and ``mode="fork"``: blocked = from the
  call to its return. Then the loop at once adds 1 to every element of the state in place
  (timed: with fork, each page first written while the writer still runs is copied, a cost
  the loop pays after the call returns; it is reported next to the same update with no save
  in flight), then waits for the save to be durable (timed as "to durable").

"Loop time lost per save" = blocked + (that update's time - the same update's time with no
save in flight): the honest total for a loop that rewrites all of its state right away
(informational rows, no target).

Checks on every async save: it completed, its manifest verifies with full sha256, and the
sha256 of each saved file equals the sha256 of that array taken just before the call, so
the in-place update after the return did not reach the checkpoint. Two phases, copy mode
then fork mode, each alternating sync and async runs after one untimed warm-up pair (the
copy warm-up creates the reusable staging buffers; that first copy-mode save, which must
fault in 1 GiB of fresh memory, is reported separately); the sync samples of both phases
form the baseline. Checkpoints are deleted between runs, untimed (then ``os.sync()`` and a
1 s pause), so no pruning is counted on either side. Headline: median blocked(copy, the
default for buffers) / median blocked(sync), target <= 0.1; the same for fork (the default
for writer callables).
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

from bench._common import RESULTS_DIR, headline, median, print_headlines, write_results
from taugrid.sdk import _async

NAME = "checkpoint_async"
PART = 256 << 20
PARTS = 4
TOTAL = PART * PARTS
ROUNDS = 4
TARGET = 0.1


def make_state() -> tuple[list[Any], str]:
    try:
        import numpy as np
    except ImportError:
        return [bytearray(os.urandom(1 << 20)) * (PART >> 20) for _ in range(PARTS)], "bytearray"
    rng = np.random.default_rng(0)
    return [rng.random(PART // 4, dtype=np.float32) for _ in range(PARTS)], "numpy"


def update_in_place(state: list[Any]) -> float:
    """One "training step" touching every byte of the state; returns its duration."""
    t0 = time.perf_counter()
    for arr in state:
        if isinstance(arr, bytearray):
            view = memoryview(arr)
            for off in range(0, len(arr), 4096):  # one write per page, like a sparse update
                view[off] = (view[off] + 1) & 0xFF
        else:
            arr += 1.0
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


def run_sync(work: Path, state: list[Any], step: int) -> dict[str, Any]:
    from taugrid.sdk import checkpoint

    t0 = time.perf_counter()
    with checkpoint.saving(step, root=work) as d:
        checkpoint.write_files(d, files_of(state))
    blocked = time.perf_counter() - t0
    ok = checkpoint.verify(work / f"step-{step:010d}") is None
    return {"blocked_s": blocked, "to_durable_s": blocked, "verified": ok}


def run_async(work: Path, state: list[Any], step: int, mode: str) -> dict[str, Any]:
    from taugrid.sdk import checkpoint

    before = digests(state)  # what the checkpoint must hold
    t0 = time.perf_counter()
    job = checkpoint.save_async(step, files_of(state), root=work, mode=mode)  # type: ignore[arg-type]
    blocked = time.perf_counter() - t0
    update_s = update_in_place(state)
    saved = job.wait(timeout=600)
    durable = time.perf_counter() - t0
    verified = checkpoint.verify(saved.path, full=True) is None
    snapshot_ok = {f.path: f.sha256 for f in saved.files} == before
    return {
        "blocked_s": blocked,
        "update_after_return_s": update_s,
        "to_durable_s": durable,
        "completed": job.done(),
        "verified": verified,
        "saved_bytes_are_call_time_bytes": snapshot_ok,
    }


def main() -> dict[str, Any]:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="ckpt-async-", dir=RESULTS_DIR))
    os.environ["TAU_CHECKPOINT_KEEP"] = "1000"  # deleted by this benchmark, untimed
    ways = ["sync", "fork", "copy"]
    samples: dict[str, list[dict[str, Any]]] = {w: [] for w in ways}
    try:
        state, kind = make_state()
        print(f"{NAME}: 1 GiB of {kind} state; sync vs save_async (fork, copy), {ROUNDS} rounds")
        plain_updates = [update_in_place(state) for _ in range(3)]
        step = 0
        first_copy: dict[str, Any] = {}
        # One mode per phase, copy first: a fork leaves every page of this process
        # write-protected until its next write, which would tax a later copy-mode phase
        # (and the copy mode's staging buffers are dropped before the fork phase, as in a
        # process that uses only fork mode).
        for mode in ("copy", "fork"):
            _async._pool.clear()
            for rnd in range(ROUNDS + 1):
                for way in ("sync", mode) if rnd % 2 else (mode, "sync"):
                    clear(work)
                    if way == "sync":
                        sample = run_sync(work, state, step)
                    else:
                        sample = run_async(work, state, step, way)
                    step += 1
                    if rnd == 0 and way == "copy":
                        first_copy = sample
                    if rnd > 0:  # round 0 warms up (and creates the staging buffers)
                        samples[way].append(sample)
                        print(
                            f"  {mode} phase, round {rnd} {way:<5} blocked "
                            f"{sample['blocked_s'] * 1000:8.1f} ms   durable after "
                            f"{sample['to_durable_s']:.2f} s"
                        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    blocked = {w: median(s["blocked_s"] for s in samples[w]) for w in ways}
    durable = {w: median(s["to_durable_s"] for s in samples[w]) for w in ways}
    update_after = {w: median(s["update_after_return_s"] for s in samples[w]) for w in ways[1:]}
    update_plain = median(plain_updates)
    ratio = {w: round(blocked[w] / blocked["sync"], 4) for w in ways[1:]}
    # What the loop really loses per save: blocked time plus the slowdown of its next update.
    lost = {"sync": blocked["sync"]}
    lost |= {w: blocked[w] + max(0.0, update_after[w] - update_plain) for w in ways[1:]}
    lost_ratio = {w: round(lost[w] / lost["sync"], 3) for w in ways[1:]}
    checks_ok = all(
        s["completed"] and s["verified"] and s["saved_bytes_are_call_time_bytes"]
        for w in ways[1:]
        for s in samples[w]
    ) and all(s["verified"] for s in samples["sync"])
    rows = [
        headline(
            "async/sync blocked time (copy, default)",
            ratio["copy"],
            target=f"<= {TARGET}",
            ok=ratio["copy"] <= TARGET and checks_ok,
        ),
        headline(
            "async/sync blocked time (fork)",
            ratio["fork"],
            target=f"<= {TARGET}",
            ok=ratio["fork"] <= TARGET and checks_ok,
        ),
        headline("async/sync loop time lost per save (fork)", lost_ratio["fork"]),
        headline("async/sync loop time lost per save (copy)", lost_ratio["copy"]),
    ]
    result = {
        "method": (
            f"copy phase then fork phase, each {ROUNDS} rounds (after 1 warm-up) of sync "
            "saving()+write_files and save_async, alternating; blocked = call to return; "
            "ratio = median blocked(async) / median blocked(sync)"
        ),
        "state": kind,
        "bytes": TOTAL,
        "median_blocked_s": {w: round(v, 4) for w, v in blocked.items()},
        "median_to_durable_s": {w: round(v, 3) for w, v in durable.items()},
        "median_update_after_return_s": {w: round(v, 3) for w, v in update_after.items()},
        "median_update_no_save_in_flight_s": round(update_plain, 3),
        "loop_time_lost_per_save_s": {w: round(v, 3) for w, v in lost.items()},
        "loop_time_lost_over_sync": lost_ratio,
        "first_copy_mode_save_blocked_s": round(first_copy.get("blocked_s", float("nan")), 3),
        "ratio_blocked_over_sync": ratio,
        "all_checks_passed": checks_ok,
        "samples": samples,
        "targets": {"ratio_blocked_over_sync": TARGET},
        "headlines": rows,
    }
    path = write_results(NAME, result)
    print(
        f"  blocked medians: sync {blocked['sync']:.3f} s | fork {blocked['fork'] * 1000:.1f} ms"
        f" | copy {blocked['copy'] * 1000:.1f} ms (first copy-mode save "
        f"{result['first_copy_mode_save_blocked_s']:.3f} s)"
    )
    print(
        f"  in-place update of the state right after the call: fork {update_after['fork']:.3f} s,"
        f" copy {update_after['copy']:.3f} s, no save in flight {update_plain:.3f} s"
    )
    print(
        f"  durable after: sync {durable['sync']:.2f} s, fork {durable['fork']:.2f} s, "
        f"copy {durable['copy']:.2f} s; all checks passed: {checks_ok}"
    )
    print_headlines(rows)
    print(f"  results: {path}")
    return result


if __name__ == "__main__":
    main()
    sys.exit(0)
