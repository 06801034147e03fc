"""The objects a policy puts on a cluster (in apply order, strictly valid) and the drift
between them and what a cluster has: only the fields TauGrid sets count, quantities by
value, left-overs named and never taken for drift of something else."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from policy_samples import ALL, TWO_COHORTS

from k8s_validate import SCHEMAS, validate_object
from taugrid.errors import UsageError
from taugrid.policy import Policy, default_policy, load_policy_text, render_kueue
from taugrid.policy.cluster_objects import POLICY_KINDS, ObjectName, desired_objects
from taugrid.policy.drift import LEFT_OVER, MISSING, QUANTITY_FIELDS, Drift, drift

KUEUE = SCHEMAS / "kueue"
GI = 2**30
POLICIES: dict[str, Policy] = {name: load_policy_text(text).policy for name, text in ALL.items()}
POLICIES["default"] = default_policy(8, "h100", 64_000, 512 * GI)
DESIRED = {name: desired_objects(p, "tau-") for name, p in POLICIES.items()}
ALL_OBJECTS = [o for objects in DESIRED.values() for o in objects]
Json = dict[str, Any]


def test_apply_order_is_cluster_scoped_kinds_then_local_queues() -> None:
    objects = desired_objects(load_policy_text(TWO_COHORTS).policy)
    kinds = [o["kind"] for o in objects]
    order = [k for _, k in POLICY_KINDS]
    assert kinds == sorted(kinds, key=order.index)
    assert order == [
        "Namespace",
        "ResourceFlavor",
        "Cohort",
        "ClusterQueue",
        "WorkloadPriorityClass",
        "LocalQueue",
    ]
    # The same set as `tau admin policy render`, policy order kept within a kind.
    rendered = render_kueue(load_policy_text(TWO_COHORTS).policy)
    assert sorted(map(str, map(ObjectName.of, objects))) == sorted(
        map(str, map(ObjectName.of, rendered))
    )
    for kind in order:
        assert [o for o in objects if o["kind"] == kind] == [
            o for o in rendered if o["kind"] == kind
        ]


@pytest.mark.parametrize("case", sorted(DESIRED))
def test_every_object_is_labelled_and_valid_strictly(case: str) -> None:
    for obj in DESIRED[case]:
        labels = obj["metadata"]["labels"]
        assert labels["taugrid.io/managed-by"] == "taugrid"
        if obj["kind"] in ("Namespace", "LocalQueue"):
            assert labels["taugrid.io/workspace"]
        assert validate_object(obj, (KUEUE,)) == [], ObjectName.of(obj)


def test_namespaces_carry_the_prefix_and_a_bad_one_is_refused_before_anything() -> None:
    policy = load_policy_text(TWO_COHORTS).policy
    names = [
        o["metadata"]["name"] for o in desired_objects(policy, "tau-") if o["kind"] == "Namespace"
    ]
    assert names == ["tau-team-a", "tau-team-b"]
    with pytest.raises(UsageError, match="not a DNS-1123 label"):
        desired_objects(policy, "Tau_")


def test_object_names_in_words() -> None:
    assert str(ObjectName("ClusterQueue", "team-a")) == "ClusterQueue team-a"
    assert str(ObjectName("LocalQueue", "main", "tau-team-a")) == "LocalQueue tau-team-a/main"


# -- drift --------------------------------------------------------------------------------


def as_served(obj: Json) -> Json:
    """``obj`` as an API server hands it back: its own fields added everywhere."""
    out = copy.deepcopy(obj)
    out["metadata"].update(
        uid="1234", resourceVersion="7", creationTimestamp="2026-01-01T00:00:00Z"
    )
    out["metadata"]["labels"]["kubernetes.io/metadata.name"] = out["metadata"]["name"]
    out["status"] = {"conditions": [{"type": "Active", "status": "True"}]}
    if out["kind"] == "ClusterQueue":
        out["spec"]["flavorFungibility"] = {"whenCanBorrow": "MayStopSearch"}
        out["spec"]["stopPolicy"] = "None"
    return out


def leaves(obj: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from leaves(v, (*path, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from leaves(v, (*path, i))
    else:
        yield path, obj


def at(obj: Any, path: tuple[Any, ...]) -> Any:
    for p in path[:-1]:
        obj = obj[p]
    return obj


def respelled(value: str) -> list[Any]:
    """Other spellings of the same quantity, as Kubernetes might write it back."""
    from taugrid.spec.units import quantity_value

    number, _ = quantity_value(value)
    out: list[Any] = [f"{number * 1000}m"]
    if number == number.to_integral_value():
        out += [int(number), str(int(number))]
    return out


def test_the_same_objects_have_no_drift_whatever_the_server_adds() -> None:
    for objects in DESIRED.values():
        assert drift(objects, [as_served(o) for o in objects]) == []


@given(st.sampled_from(ALL_OBJECTS), st.data())
def test_quantities_compare_by_value(obj: Json, data: st.DataObject) -> None:
    live = as_served(obj)
    amounts = [(p, v) for p, v in leaves(live) if p and p[-1] in QUANTITY_FIELDS]
    for path, value in amounts:
        at(live, path)[path[-1]] = data.draw(st.sampled_from(respelled(value)))
    assert drift([obj], [live]) == []


IDENTITY = {("apiVersion",), ("kind",), ("metadata", "name"), ("metadata", "namespace")}


@given(st.sampled_from(ALL_OBJECTS), st.data())
def test_one_changed_field_is_one_drift_naming_it(obj: Json, data: st.DataObject) -> None:
    fields = [(p, v) for p, v in leaves(obj) if p not in IDENTITY]
    path, value = data.draw(st.sampled_from(fields))
    changed: Any = (
        (not value)
        if isinstance(value, bool)
        else value + 1
        if isinstance(value, int)
        else f"{value}-x"
    )
    live = as_served(obj)
    at(live, path)[path[-1]] = changed
    [found] = drift([obj], [live])
    assert found.object == ObjectName.of(obj) and found.state == "changed"
    if path[-1] == "name" and isinstance(path[-2], int):  # an item of a list keyed by name
        assert f"[{changed}]: in the cluster, not in the policy" in found.what
    else:
        last = f"[{path[-1]}]" if isinstance(path[-1], int) else path[-1]
        assert found.what.endswith(
            f"{last}: is {json.dumps(changed)} in the cluster, the policy says {json.dumps(value)}"
        )


@given(st.sampled_from(ALL_OBJECTS), st.data())
def test_a_field_the_cluster_lacks_is_drift(obj: Json, data: st.DataObject) -> None:
    fields = [(p, v) for p, v in leaves(obj) if p not in IDENTITY and isinstance(p[-1], str)]
    path, value = data.draw(st.sampled_from(fields))
    live = as_served(obj)
    del at(live, path)[path[-1]]
    [found] = drift([obj], [live])
    assert found.what.endswith(
        f"{path[-1]}: not set in the cluster, the policy says {json.dumps(value)}"
    )


def test_changed_field_in_words() -> None:
    [cq] = [o for o in DESIRED["two-cohorts"] if o["kind"] == "ClusterQueue"][:1]
    live = as_served(cq)
    live["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = 4
    del live["spec"]["preemption"]["reclaimWithinCohort"]
    assert drift([cq], [live]) == [
        Drift(
            ObjectName("ClusterQueue", "team-a"),
            'spec.preemption.reclaimWithinCohort: not set in the cluster, the policy says "Any"; '
            "spec.resourceGroups[0].flavors[h100].resources[nvidia.com/gpu].nominalQuota: is 4 "
            'in the cluster, the policy says "8"',
            "changed",
        )
    ]


def test_lists_are_compared_whole_and_in_order() -> None:
    cq = next(o for o in DESIRED["two-cohorts"] if o["kind"] == "ClusterQueue")
    flavors = cq["spec"]["resourceGroups"][0]["flavors"]
    assert [f["name"] for f in flavors] == ["h100", "a100"]
    swapped = as_served(cq)
    swapped["spec"]["resourceGroups"][0]["flavors"].reverse()
    [found] = drift([cq], [swapped])
    assert found.what == (
        "spec.resourceGroups[0].flavors: order is a100, h100 in the cluster, the policy says "
        "h100, a100"
    )
    extra = as_served(cq)
    extra["spec"]["resourceGroups"][0]["flavors"].append({"name": "spare", "resources": []})
    extra["spec"]["resourceGroups"][0]["coveredResources"].pop()
    [found] = drift([cq], [extra])
    assert "flavors[spare]: in the cluster, not in the policy" in found.what
    assert "coveredResources: is" in found.what


def test_missing_and_left_over_objects() -> None:
    desired = DESIRED["two-cohorts"]
    live = [as_served(o) for o in desired]
    unmanaged = as_served(desired[0])
    unmanaged["metadata"].update(name="kube-system", labels={})
    live.append(unmanaged)
    # Workspace team-b left the policy: its Namespace and LocalQueues are left over.
    kept = [o for o in desired if o["metadata"]["labels"].get("taugrid.io/workspace") != "team-b"]
    found = drift(kept, live)
    assert [str(d.object) for d in found] == [
        "Namespace tau-team-b",
        "LocalQueue tau-team-b/batch",
        "LocalQueue tau-team-b/main",
        "LocalQueue tau-team-b/serving",
    ]
    assert {(d.state, d.what) for d in found} == {("left_over", LEFT_OVER)}
    assert "(not deleted; delete it or add it back)" in LEFT_OVER
    # What the cluster lacks is missing; kube-system is not TauGrid's, so never left over.
    assert drift(desired, live[1:]) == [Drift(ObjectName.of(desired[0]), MISSING, "missing")]
    assert drift(desired, []) == [Drift(ObjectName.of(o), MISSING, "missing") for o in desired]
