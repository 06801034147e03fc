"""Persisting 1 GiB of state with ``taugrid.checkpoint.saving()`` against a raw disk write.

Baseline: ``dd if=/dev/zero of=FILE bs=1M count=1024 conv=fdatasync`` into the same
directory (same filesystem as the checkpoints, checked by ``st_dev``), run from this process;
its time is the one dd prints itself (so dd's process start is not counted against it).

Measured: one ``with saving(step) as d:`` block, from entering it to leaving it, writing
4 buffers of 256 MiB (1 GiB) and committing: sha256 of every byte, fsync of every file, of
the manifest and of the directories, the rename and the fsync of the root. Two ways of
writing inside the block:

* ``write_files``: ``taugrid.checkpoint.write_files(d, {...})``, the SDK's buffer writer:
  each buffer is hashed in other threads while it is written, with O_DIRECT through two
  page-aligned bounce buffers (no copy into the page cache, no writeback), and each file is
  fsynced as soon as it is written, so the commit reads nothing back.
* ``plain``: ``open(d / name, "wb").write(buf)``, what any framework's own save does; the
  commit then hashes the files (from the page cache) while another thread fsyncs them.

Honesty notes: dd writes through the page cache (``conv=fdatasync`` flushes it at the end)
while ``write_files`` bypasses it, which costs less CPU; that is the SDK's design
(``TAU_CHECKPOINT_DIRECT=0`` turns it off), and a second, informational baseline shows the
raw direct-I/O rate: ``dd ... bs=8M count=128 oflag=direct conv=fdatasync``. dd writes
zeros, the checkpoint writes random bytes (each 256 MiB part is its own 1 MiB random block
repeated; nothing compresses or deduplicates on this path, so content does not change the
disk's work, and the hashing is real). Neither side drops the
page cache; the previous run's files are deleted (untimed), then before every timed run
``os.sync()`` flushes whatever is left and a 1 s pause lets the disk settle (see
``settle``). The four runs alternate, in a rotating order, ``ROUNDS`` times after one
untimed warm-up each; headlines are ratios of medians.
Every checkpoint is verified (full sha256, untimed) and deleted afterwards.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._common import RESULTS_DIR, headline, median, print_headlines, write_results

NAME = "checkpoint_persist"
PART = 256 << 20
PARTS = 4
TOTAL = PART * PARTS  # 1 GiB
ROUNDS = 7
TARGET = 0.8
SETTLE_S = 1.0
_DD_TIME = re.compile(r"copied, ([0-9.]+) s")


def make_state() -> list[bytearray]:
    return [bytearray(os.urandom(1 << 20)) * (PART >> 20) for _ in range(PARTS)]


def settle() -> None:
    """Flush what the previous run left and let the disk finish with it (the filesystem
    here is ext4 mounted with ``discard``: deleting the previous run's 1 GiB sends discards
    that would otherwise land on the next timed run, whichever it is)."""
    os.sync()
    time.sleep(SETTLE_S)


def same_filesystem(a: Path, b: Path) -> bool:
    return os.stat(a).st_dev == os.stat(b).st_dev


def run_dd(work: Path, *, direct: bool = False) -> dict[str, float]:
    target = work / "dd.bin"
    if direct:
        args = ["bs=8M", f"count={TOTAL >> 23}", "oflag=direct", "conv=fdatasync"]
    else:
        args = ["bs=1M", f"count={TOTAL >> 20}", "conv=fdatasync"]
    t0 = time.perf_counter()
    proc = subprocess.run(
        ["dd", "if=/dev/zero", f"of={target}", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    wall = time.perf_counter() - t0
    m = _DD_TIME.search(proc.stderr)
    own = float(m.group(1)) if m else wall
    assert target.stat().st_size == TOTAL
    target.unlink()
    return {"seconds": own, "wall_seconds": wall}


def run_saving(work: Path, state: list[bytearray], step: int, how: str) -> dict[str, Any]:
    from taugrid.sdk import checkpoint

    t0 = time.perf_counter()
    with checkpoint.saving(step, root=work) as d:
        if how == "write_files":
            checkpoint.write_files(d, {f"part-{i}.bin": buf for i, buf in enumerate(state)})
        else:
            for i, buf in enumerate(state):
                with open(d / f"part-{i}.bin", "wb") as f:
                    f.write(buf)
        t_block = time.perf_counter()
    t1 = time.perf_counter()
    path = work / f"step-{step:010d}"
    problem = checkpoint.verify(path, full=True)
    size = sum(f.stat().st_size for f in path.iterdir() if f.name.startswith("part-"))
    shutil.rmtree(path)
    return {
        "seconds": t1 - t0,
        "block_seconds": t_block - t0,
        "commit_seconds": t1 - t_block,
        "verified": problem is None,
        "problem": problem,
        "bytes": size,
    }


def main() -> dict[str, Any]:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="ckpt-persist-", dir=RESULTS_DIR))
    os.environ["TAU_CHECKPOINT_KEEP"] = "1000"  # this benchmark deletes its own checkpoints
    try:
        if not same_filesystem(work, Path("/work") if Path("/work").exists() else RESULTS_DIR):
            print(f"{NAME}: note: {work} is not on the filesystem of /work", file=sys.stderr)
        free = shutil.disk_usage(work).free
        if free < 4 * TOTAL:
            raise SystemExit(f"{NAME}: needs 4 GiB free in {work}, has {free >> 20} MiB")
        print(f"{NAME}: 1 GiB; dd, dd direct, saving() (write_files, plain), {ROUNDS} rounds")
        state = make_state()
        ways = ["dd", "write_files", "plain", "dd_direct"]
        samples: dict[str, list[dict[str, Any]]] = {w: [] for w in ways}
        step = 0
        for rnd in range(ROUNDS + 1):
            order = ways[rnd % len(ways) :] + ways[: rnd % len(ways)]
            for way in order:
                settle()
                if way.startswith("dd"):
                    sample: dict[str, Any] = run_dd(work, direct=way == "dd_direct")
                else:
                    sample = run_saving(work, state, step, way)
                    step += 1
                if rnd > 0:  # round 0 warms up page cache, allocator and disk
                    samples[way].append(sample)
                    print(f"  round {rnd} {way:<12} {sample['seconds']:.3f} s")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    med = {w: median(s["seconds"] for s in samples[w]) for w in ways}
    gibps = {w: round(TOTAL / med[w] / (1 << 30), 3) for w in ways}
    ratio = {w: round(med["dd"] / med[w], 3) for w in ("write_files", "plain")}
    ratio_direct = round(med["dd_direct"] / med["write_files"], 3)
    saves = ("write_files", "plain")
    all_verified = all(s["verified"] and s["bytes"] == TOTAL for w in saves for s in samples[w])
    rows = [
        headline(
            "saving()+write_files / dd throughput",
            ratio["write_files"],
            target=f">= {TARGET}",
            ok=ratio["write_files"] >= TARGET and all_verified,
        ),
        # Informational: with the user's own writes the SDK cannot hash while they write;
        # it hashes (from the page cache) while it fsyncs, at commit.
        headline("saving()+plain writes / dd throughput", ratio["plain"]),
        headline("saving()+write_files / dd oflag=direct", ratio_direct),
    ]
    result = {
        "method": (
            f"{ROUNDS} rounds (after 1 warm-up) of dd / saving()+write_files / saving()+plain / "
            "dd oflag=direct "
            "writes of 1 GiB, rotating order, os.sync() and a 1 s pause before each; ratio = "
            "median dd time "
            "(dd's own) / median saving() time (enter to exit of the with block)"
        ),
        "bytes": TOTAL,
        "median_seconds": {w: round(v, 3) for w, v in med.items()},
        "median_gib_per_s": gibps,
        "ratio_over_dd": ratio,
        "write_files_over_dd_direct": ratio_direct,
        "median_block_seconds": {
            w: round(median(s["block_seconds"] for s in samples[w]), 3) for w in saves
        },
        "median_commit_seconds": {
            w: round(median(s["commit_seconds"] for s in samples[w]), 3) for w in saves
        },
        "all_checkpoints_verified": all_verified,
        "samples": samples,
        "targets": {"ratio_over_dd": TARGET},
        "headlines": rows,
    }
    path = write_results(NAME, result)
    print(
        f"  medians: dd {med['dd']:.3f} s ({gibps['dd']} GiB/s) | write_files "
        f"{med['write_files']:.3f} s ({gibps['write_files']} GiB/s) | plain {med['plain']:.3f} s "
        f"({gibps['plain']} GiB/s) | dd direct {med['dd_direct']:.3f} s "
        f"({gibps['dd_direct']} GiB/s); all verified: {all_verified}"
    )
    print_headlines(rows)
    print(f"  results: {path}")
    return result


if __name__ == "__main__":
    main()
    sys.exit(0)
