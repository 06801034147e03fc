"""Sentences for researchers: why a run waits, why it can never run, why it was preempted.

Pure formatting over the scheduler's quota state; every sentence carries the numbers.
"""

from __future__ import annotations

from collections.abc import Sequence

from taugrid.domain.quota import Flavor, Resource, Workload
from taugrid.domain.scheduling_quota import Demand, QuotaModel, Usage

_GIB = 1 << 30


def qty(res: Resource, amount: int) -> str:
    """A bare amount in the unit researchers think in: GPUs, CPU cores, GiB."""
    if res == "gpu":
        return str(amount)
    if res == "cpu":
        return f"{amount / 1000:g}"
    return f"{amount / _GIB:.3g} GiB"


def amount(res: Resource, value: int) -> str:
    """An amount with its noun: '2 GPUs', '1 GPU', '0.5 CPU', '16 GiB of memory'."""
    if res == "gpu":
        return f"{value} GPU" + ("" if value == 1 else "s")
    if res == "cpu":
        return f"{qty(res, value)} CPU" + ("" if value == 1000 else "s")
    return f"{qty(res, value)} of memory"


def plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def ids(workloads: Sequence[str], most: int = 3) -> str:
    shown = ", ".join(list(workloads)[:most])
    more = len(workloads) - most
    return shown + (f" and {more} more" if more > 0 else "")


def where(pos: int, total: int, cq: str) -> str:
    return f"position {pos} of {total} in queue {cq}"


def no_room(
    w: Workload,
    demand: Demand,
    flavors: Sequence[str],
    now: Usage,
    future: Usage,
    runs: dict[tuple[str, str], int],
    reserved_by: dict[tuple[tuple[str, str], str], list[str]],
) -> str:
    """Why ``w`` does not fit: the first blocking resource of its first flavor, with numbers."""
    cq = w.cluster_queue
    if not flavors:
        return f"waiting for quota in queue {cq}"
    text = _flavor_no_room(cq, flavors[0], demand, now.model, now, future, runs, reserved_by)
    rest = list(flavors[1:])
    if len(rest) == 1:
        text += f"; flavor {rest[0]} has no room either"
    elif rest:
        text += f"; flavors {', '.join(rest)} have no room either"
    return text


def _flavor_no_room(
    cq: str,
    flavor: str,
    demand: Demand,
    model: QuotaModel,
    now: Usage,
    future: Usage,
    runs: dict[tuple[str, str], int],
    reserved_by: dict[tuple[tuple[str, str], str], list[str]],
) -> str:
    blocking: tuple[Resource, int] | None = None
    for res, value in demand:
        fr = (flavor, res)
        if value > now.available(cq, fr) or value > future.available(cq, fr):
            blocking = (res, value)
            break
    if blocking is None:  # fits by the numbers: only a reservation can be in the way
        blocking = demand[0]
    res, value = blocking
    fr = (flavor, res)
    lim = model.limit(cq, fr)
    head = f"waiting for {amount(res, value)} of flavor {flavor} in queue {cq}"
    if lim is None:
        return f"{head}: the queue has no {res} quota in flavor {flavor}"
    used = now.used_of(cq, fr)
    n = runs.get((cq, flavor), 0)
    text = f"{head}: {qty(res, used)} of {qty(res, lim.nominal)} in use by {plural(n, 'run')}"
    cohort = model.cohort_of.get(cq)
    if cohort is None:
        text += f"; queue {cq} has no cohort to borrow from"
    else:
        need = used + value - lim.nominal
        free = max(0, min(now.from_cohort(cq, fr), future.from_cohort(cq, fr)))
        if need > 0:
            text += (
                f"; would need to borrow {qty(res, need)} from cohort {cohort},"
                f" which has {qty(res, free)} free"
            )
            if lim.borrowing_limit is not None:
                text += (
                    f" (borrowing limit {qty(res, lim.borrowing_limit)},"
                    f" {qty(res, max(0, used - lim.nominal))} already borrowed)"
                )
        else:
            lent = lim.nominal - used - max(0, lim.guaranteed - used) - free
            if lent > 0:
                text += (
                    f"; the other {qty(res, lim.nominal - used)} of its quota are lent to"
                    f" other queues of cohort {cohort} until their runs finish"
                )
    holders = reserved_by.get((model.scope(cq), flavor), [])
    if holders:
        text += f"; quota is held for {ids(holders)}, waiting for preempted runs to stop"
    return text


def preempting(
    cq: str, flavor: str, demand: Demand, fresh: Sequence[str], stopping: Sequence[str]
) -> str:
    """A preemptor's wait: the victims it just chose and/or the ones still stopping."""
    need = ", ".join(amount(r, v) for r, v in demand)
    if fresh:
        text = f"preempting {plural(len(fresh), 'run')} ({ids(fresh)})"
        if stopping:
            text += f" and waiting for {plural(len(stopping), 'stopping run')}"
        text += f" to free {need} of flavor {flavor} in queue {cq};"
    elif stopping:
        text = (
            f"{need} of flavor {flavor} in queue {cq} will be free once"
            f" {plural(len(stopping), 'run')} being preempted ({ids(stopping)})"
            f" {'has' if len(stopping) == 1 else 'have'} stopped;"
        )
    else:
        text = (
            f"{need} of flavor {flavor} in queue {cq} will be free once the runs being"
            " preempted there have stopped;"
        )
    return text + " it starts then"


def never_sentence(
    w: Workload,
    demand: Demand,
    model: QuotaModel,
    flavor_types: dict[str, str | None],
    candidate_flavors: Sequence[str],
) -> tuple[str, str]:
    """(reason, sentence) for a workload no state of its queue can ever admit."""
    cq = w.cluster_queue
    if not candidate_flavors:
        offered = [
            f"{f} ({'GPU type ' + t if t else 'any GPU type'})" for f, t in flavor_types.items()
        ]
        return (
            "NoMatchingFlavor",
            f"asks for GPU type {w.gpu_type} but queue {cq} only has flavor"
            f"{'s' if len(offered) != 1 else ''} {', '.join(offered) or '(none)'}",
        )
    why = []
    for flavor in candidate_flavors:
        for res, value in demand:
            most = model.max_capacity(cq, (flavor, res))
            if value > most:
                text = f"{amount(res, max(0, most))} of flavor {flavor}"
                why.append(text + (f" (it has no {res} quota there)" if most <= 0 else ""))
                break
    res_names = ", ".join(amount(r, v) for r, v in demand)
    cohort = model.cohort_of.get(cq)
    scope = (
        f"even with cohort {cohort} lending all it can"
        if cohort
        else "with no cohort to borrow from"
    )
    return (
        "ExceedsMaxQuota",
        f"asks for {res_names} but queue {cq} can hold at most {' or '.join(why)} {scope},"
        " so it can never be admitted",
    )


def flavor_types(flavors: dict[str, Flavor], names: Sequence[str]) -> dict[str, str | None]:
    return {n: (flavors[n].gpu_type if n in flavors else None) for n in names}
