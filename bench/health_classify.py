"""GPU-health classifier throughput over a replayed day of 1,000 GPUs, against a bare loop
that only parses the same records.

A synthetic day (``random.Random(SEED)``, so every run replays the same records): 125
nodes of 8 GPUs, each GPU with 100 to 300 benign readings spread over 24 h (thermal
slowdowns, the driver's recovery action NONE, ECC deltas of 0, pending remaps, RESTART_APP
and IGNORE Xids: L0 and L1), a third of its Xids seen twice (NVML and the kernel log, up
to 2 s apart: the cross-source dedup), and ``FAULTY`` GPUs with one fault each (a DBE with
Xid 63, Xid 79, Xid 64 twice, 5 fatal Xids in a day, an unknown Xid, a remap failure, an
NVLink down, an NVML hang). The records are JSON lines in time order, as a
``ReplaySource`` reads them.

Three loops over the same lines, in this process, each timed with ``perf_counter``:

* **parse** (the baseline): ``json.loads`` then ``Observation(**record)`` (which checks
  it) per line: what any consumer of the records pays.
* **classify**: the same, then ``Classifier.observe`` (the stateful holder an agent's
  event loop uses).
* **pure**: the same, then ``classify(state, obs)``, which returns a new state (per
  event acted on, a copy of the node index, 125 entries here, and of that node's tracks).

``REPEATS`` rounds, the loops' order rotated each round; headlines are the medians:
events/s of each loop, classify/parse and pure/parse (1.0 would mean classifying costs
nothing over parsing), and the classifier's own cost per event in microseconds. The
decisions are checked: the faults yield their L3/L4/L5 decisions and the twins are
marked duplicate.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from bench._common import headline, print_headlines, write_results
from taugrid.domain.health import Classifier, ClassifierState, Level, Observation, classify

NAME = "health_classify"
SEED = 13
NODES, GPUS_PER_NODE = 125, 8
FAULTY = 40
REPEATS = 5
DAY = 24 * 3600.0
BENIGN_XIDS = (8, 13, 31, 32, 43, 45, 92, 94, 121)


def _rec(kind: str, gpu: str, node: str, at: float, **extra: Any) -> dict[str, Any]:
    return {"kind": kind, "gpu_uuid": gpu, "node": node, "at": round(at, 3), **extra}


def _xid(gpu: str, node: str, at: float, x: int, rng: random.Random) -> list[dict[str, Any]]:
    out = [_rec("xid", gpu, node, at, xid=x, source="nvml")]
    if rng.random() < 1 / 3:  # the kernel log saw it too
        out.append(_rec("xid", gpu, node, at + rng.uniform(0, 2), xid=x, source="kmsg"))
    return out


def _benign(gpu: str, node: str, at: float, rng: random.Random) -> list[dict[str, Any]]:
    roll = rng.random()
    if roll < 0.40:
        return [_rec("thermal", gpu, node, at, value=rng.randint(86, 92), source="poll")]
    if roll < 0.55:
        return [_rec("recovery_action", gpu, node, at, value="NONE", source="poll")]
    if roll < 0.65:
        return [_rec("ecc_dbe", gpu, node, at, value=0, source="poll")]
    if roll < 0.70:
        return [_rec("remap_pending", gpu, node, at, source="poll")]
    return _xid(gpu, node, at, rng.choice(BENIGN_XIDS), rng)


def _fault(n: int, gpu: str, node: str, rng: random.Random) -> list[dict[str, Any]]:
    t = rng.uniform(0, DAY - 6 * 3600)
    match n % 8:
        case 0:
            return _xid(gpu, node, t, 48, rng) + _xid(gpu, node, t + 4, 63, rng)
        case 1:
            return _xid(gpu, node, t, 79, rng)
        case 2:
            return _xid(gpu, node, t, 64, rng) + _xid(gpu, node, t + 3600, 64, rng)
        case 3:
            return [r for i in range(5) for r in _xid(gpu, node, t + i * 3600, 46, rng)]
        case 4:
            return _xid(gpu, node, t, 250, rng)
        case 5:
            return [_rec("remap_failure", gpu, node, t, source="poll")]
        case 6:
            return [_rec("nvlink_down", gpu, node, t, source="poll", detail="link 3")]
        case _:
            return [_rec("nvml_hang", gpu, node, t, value=47.0, source="poll")]


def day_of_records(seed: int = SEED) -> list[str]:
    """The day's records as JSON lines, in time order."""
    rng = random.Random(seed)
    gpus = [(f"GPU-{n:03d}-{g}", f"node-{n:03d}") for n in range(NODES) for g in range(8)]
    records: list[dict[str, Any]] = []
    for gpu, node in gpus:
        for _ in range(rng.randint(100, 300)):
            records += _benign(gpu, node, rng.uniform(0, DAY), rng)
    for n, (gpu, node) in enumerate(rng.sample(gpus, FAULTY)):
        records += _fault(n, gpu, node, rng)
    records.sort(key=lambda r: r["at"])
    return [json.dumps(r, separators=(",", ":")) for r in records]


def parse_only(lines: list[str]) -> int:
    n = 0
    for line in lines:
        Observation(**json.loads(line))
        n += 1
    return n


def with_classifier(lines: list[str]) -> Counter[str]:
    c = Classifier()
    seen: Counter[str] = Counter()
    for line in lines:
        for d in c.observe(Observation(**json.loads(line))):
            seen["duplicate" if d.duplicate else d.level.name] += 1
    return seen


def with_pure_classify(lines: list[str]) -> Counter[str]:
    state = ClassifierState()
    seen: Counter[str] = Counter()
    for line in lines:
        state, decisions = classify(state, Observation(**json.loads(line)))
        for d in decisions:
            seen["duplicate" if d.duplicate else d.level.name] += 1
    return seen


def _timed(fn: Callable[[list[str]], Any], lines: list[str]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn(lines)
    return time.perf_counter() - t0, out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=REPEATS)
    args = ap.parse_args(argv)
    t_start = time.perf_counter()
    lines = day_of_records()
    loops: dict[str, Callable[[list[str]], Any]] = {
        "parse": parse_only,
        "classify": with_classifier,
        "pure": with_pure_classify,
    }
    took: dict[str, list[float]] = {name: [] for name in loops}
    counts: dict[str, Any] = {}
    for r in range(args.repeats):
        names = list(loops)
        names = names[r % len(names) :] + names[: r % len(names)]
        for name in names:
            secs, out = _timed(loops[name], lines)
            took[name].append(secs)
            counts[name] = out
    assert counts["classify"] == counts["pure"], "Classifier and classify disagree"
    seen: Counter[str] = counts["classify"]
    assert seen[Level.L3.name] and seen[Level.L4.name] and seen[Level.L5.name], seen
    assert seen["duplicate"] > 0, "no twin was deduplicated"
    n = len(lines)
    rate = {name: n / statistics.median(v) for name, v in took.items()}
    cost_us = (statistics.median(took["classify"]) - statistics.median(took["parse"])) / n * 1e6
    rows = [
        headline("parse only: events/s (baseline)", round(rate["parse"])),
        headline("parse + Classifier.observe: events/s", round(rate["classify"])),
        headline("parse + classify(): events/s", round(rate["pure"])),
        headline("Classifier / parse (throughput)", round(rate["classify"] / rate["parse"], 3)),
        headline("classify() / parse (throughput)", round(rate["pure"] / rate["parse"], 3)),
        headline("Classifier cost per event (us)", round(cost_us, 2)),
        headline("a day of 1,000 GPUs, Classifier (s)", round(n / rate["classify"], 2)),
    ]
    data = {
        "events": n,
        "gpus": NODES * GPUS_PER_NODE,
        "faulty_gpus": FAULTY,
        "seed": SEED,
        "decisions": dict(sorted(seen.items())),
        "seconds": {name: [round(s, 4) for s in v] for name, v in took.items()},
        "events_per_s": {name: round(v) for name, v in rate.items()},
        "repeats": args.repeats,
        "took_s": round(time.perf_counter() - t_start, 1),
        "headlines": rows,
    }
    path = write_results(NAME, data)
    print(f"GPU-health classifier, a day of {n:,} events from 1,000 GPUs, {args.repeats} rounds")
    print(f"  decisions: {dict(sorted(seen.items()))}")
    print_headlines(rows)
    print(f"  results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
