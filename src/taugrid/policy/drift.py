"""What a cluster has that differs from what the policy wants, in words.

Pure: ``drift(desired, live)`` over plain dicts (``desired`` from
``cluster_objects.desired_objects``, ``live`` as the API server lists them).

Only the fields TauGrid sets are compared: the desired object's own keys, recursively.
The API server and Kueue add fields of their own (``status``, ``uid``, defaults such as
``flavorFungibility``, the ``kubernetes.io/metadata.name`` label) and those are nobody's
drift. Lists are compared whole, since a list TauGrid sets is the whole list (an extra
flavor in a ClusterQueue changes its quota): items with a ``name`` by name and in order
(the order of a queue's flavors is the order Kueue tries them), others position by
position. Quota amounts are compared by value, as Kubernetes compares quantities
(``"8"`` and ``8``, ``"1500m"`` and ``"1.5"`` are one amount), since Kueue's webhook may
write them back in canonical form.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal

from taugrid.policy.cluster_objects import JsonObject, ObjectName, apply_rank, is_managed
from taugrid.spec.units import quantity_value

DriftState = Literal["missing", "changed", "left_over"]
MISSING = "missing: not in the cluster (or not labelled taugrid.io/managed-by=taugrid)"
LEFT_OVER = (
    "left over: in the cluster with taugrid.io/managed-by=taugrid but not in the policy "
    "(not deleted; delete it or add it back)"
)
QUANTITY_FIELDS = frozenset({"nominalQuota", "borrowingLimit", "lendingLimit"})


@dataclass(frozen=True)
class Drift:
    """One object that differs: which, how (in words), and whether it is missing,
    changed or left over."""

    object: ObjectName
    what: str
    state: DriftState

    def __str__(self) -> str:
        return f"{self.object}: {self.what}"


def drift(desired: Sequence[JsonObject], live: Sequence[JsonObject]) -> list[Drift]:
    """Each desired object that is missing or differs (in ``desired``'s order), then each
    live object labelled managed-by that ``desired`` lacks (in apply order)."""
    found = {ObjectName.of(o): o for o in live}
    wanted = set()
    out: list[Drift] = []
    for obj in desired:
        name = ObjectName.of(obj)
        wanted.add(name)
        have = found.get(name)
        if have is None:
            out.append(Drift(name, MISSING, "missing"))
            continue
        changes = list(differences(obj, have))
        if changes:
            out.append(Drift(name, "; ".join(changes), "changed"))
    left = [n for n, o in found.items() if n not in wanted and is_managed(o)]
    left.sort(key=lambda n: (apply_rank(n.kind), n.namespace or "", n.name))
    out += [Drift(n, LEFT_OVER, "left_over") for n in left]
    return out


def differences(want: Any, have: Any, path: str = "", key: str = "") -> Iterator[str]:
    """Each place where ``have`` differs from ``want`` in a field ``want`` sets, as
    ``path: how``."""
    if isinstance(want, dict):
        if not isinstance(have, dict):
            yield _changed(path, want, have)
            return
        for k, sub in want.items():
            where = f"{path}.{k}" if path else k
            if k not in have:
                yield f"{where}: not set in the cluster, the policy says {_show(sub)}"
            else:
                yield from differences(sub, have[k], where, k)
    elif isinstance(want, list):
        if not isinstance(have, list):
            yield _changed(path, want, have)
        elif _named(want) and _named(have):
            yield from _named_differences(want, have, path)
        elif len(want) != len(have):
            yield _changed(path, want, have)
        else:
            for i, (w, h) in enumerate(zip(want, have, strict=True)):
                yield from differences(w, h, f"{path}[{i}]", key)
    elif not _same(want, have, key):
        yield _changed(path, want, have)


def _named(items: list[Any]) -> bool:
    return all(isinstance(i, dict) and isinstance(i.get("name"), str) for i in items)


def _named_differences(want: list[JsonObject], have: list[JsonObject], path: str) -> Iterator[str]:
    live = {h["name"]: h for h in have}
    names = [w["name"] for w in want]
    for w in want:
        where = f"{path}[{w['name']}]"
        if w["name"] not in live:
            yield f"{where}: not in the cluster, the policy has it"
        else:
            yield from differences(w, live[w["name"]], where)
    extra = [h["name"] for h in have if h["name"] not in names]
    for name in extra:
        yield f"{path}[{name}]: in the cluster, not in the policy"
    order = [h["name"] for h in have]
    if not extra and sorted(order) == sorted(names) and order != names:
        yield (
            f"{path}: order is {', '.join(order)} in the cluster, "
            f"the policy says {', '.join(names)}"
        )


def _same(want: Any, have: Any, key: str) -> bool:
    if key in QUANTITY_FIELDS:
        a, b = _amount(want), _amount(have)
        if a is not None and b is not None:
            return a == b
    # type too: True == 1 in Python, but not to the API server
    return type(want) is type(have) and bool(want == have)


def _amount(value: Any) -> Decimal | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, str):
        try:
            number, _ = quantity_value(value)
        except ValueError:
            return None
        return number
    return None


def _changed(path: str, want: Any, have: Any) -> str:
    return f"{path or '<object>'}: is {_show(have)} in the cluster, the policy says {_show(want)}"


def _show(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return text if len(text) <= 120 else text[:117] + "..."
