"""LightkubeClient's verbs over real HTTP against kmock: every verb for the kinds TauGrid
creates, server-side apply, string quantities and unknown fields, label filtering."""

from __future__ import annotations

import pytest

from kube_emulator import KubeEmulator, sample
from taugrid.executors.kubernetes.client import FIELD_MANAGER, KubeError, NotFound, ObjectRef
from taugrid.executors.kubernetes.lightkube_client import LightkubeClient

pytestmark = pytest.mark.timeout(20)

KINDS_USED = ["Job", "Service", "Secret", "Namespace", "RayJob", "Workload", "LocalQueue"]


@pytest.mark.parametrize("kind", KINDS_USED)
def test_every_verb_round_trips(kind: str, kube: LightkubeClient, kube_emulator: KubeEmulator):
    obj = sample(kind, "mnist-1", labels={"taugrid.io/run-id": "r1"})
    ref = ObjectRef.of(obj)

    created = kube.create(obj)
    assert created == obj
    assert kube_emulator.get(ref.api_version, kind, ref.namespace, "mnist-1") == obj
    assert kube.get(ref) == obj

    listed = kube.list(ref.api_version, kind, ref.namespace)
    assert [o["metadata"]["name"] for o in listed.items] == ["mnist-1"]

    changed = {**obj, "metadata": {**obj["metadata"], "labels": {"taugrid.io/run-id": "r2"}}}
    applied = kube.apply(changed)
    assert applied["metadata"]["labels"] == {"taugrid.io/run-id": "r2"}
    assert kube.get(ref)["metadata"]["labels"] == {"taugrid.io/run-id": "r2"}

    assert kube.delete(ref) is True
    assert kube_emulator.get(ref.api_version, kind, ref.namespace, "mnist-1") is None
    with pytest.raises(NotFound):
        kube.get(ref)
    assert kube.delete(ref) is False  # already gone is not an error


def test_paths_follow_the_scope_of_each_kind(kube: LightkubeClient, kube_emulator: KubeEmulator):
    kube.create(sample("Job", "j", namespace="team-a"))
    kube.create(sample("Namespace", "team-b"))
    kube.create(sample("Workload", "w", namespace="team-a"))
    kube.create(sample("ClusterQueue", "cq"))
    paths = [r.path for r in kube_emulator.requests("create")]
    assert paths == [
        "/apis/batch/v1/namespaces/team-a/jobs",
        "/api/v1/namespaces",
        "/apis/kueue.x-k8s.io/v1beta2/namespaces/team-a/workloads",
        "/apis/kueue.x-k8s.io/v1beta2/clusterqueues",
    ]


def test_apply_is_server_side_apply_that_creates_then_updates(
    kube: LightkubeClient, kube_emulator: KubeEmulator
):
    job = sample("Job", "ssa")
    first = kube.apply(job)
    assert first["spec"]["suspend"] is True
    assert kube_emulator.get("batch/v1", "Job", "team-a", "ssa") == job

    job["metadata"]["labels"]["taugrid.io/attempt"] = "1"
    second = kube.apply(job, force=False)
    assert second["metadata"]["labels"]["taugrid.io/attempt"] == "1"

    applies = kube_emulator.requests("apply")
    assert [r.method for r in applies] == ["PATCH", "PATCH"]
    assert all(r.path == "/apis/batch/v1/namespaces/team-a/jobs/ssa" for r in applies)
    assert all(r.headers["Content-Type"] == "application/apply-patch+yaml" for r in applies)
    assert applies[0].params == {"fieldManager": FIELD_MANAGER, "force": "true"}
    assert applies[1].params == {"fieldManager": "taugrid"}
    assert applies[0].data == {
        **job,
        "metadata": {**job["metadata"], "labels": {"app": "taugrid-test"}},
    }


def test_quantities_stay_strings_and_unknown_fields_survive(
    kube: LightkubeClient, kube_emulator: KubeEmulator
):
    job = sample("Job", "q")
    job["spec"]["futureField"] = {"added": "in Kubernetes 1.40"}  # no model knows it
    kube.create(job)
    sent = kube_emulator.requests("create")[0].data
    limits = sent["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/gpu": "8", "cpu": "500m", "memory": "16Gi"}
    assert sent["spec"]["futureField"] == {"added": "in Kubernetes 1.40"}

    back = kube.get(ObjectRef.of(job))
    limits = back["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/gpu": "8", "cpu": "500m", "memory": "16Gi"}
    assert all(isinstance(v, str) for v in limits.values())
    assert back["spec"]["futureField"] == {"added": "in Kubernetes 1.40"}


def test_list_filters_by_labels_even_where_the_server_ignores_the_selector(
    kube: LightkubeClient, kube_emulator: KubeEmulator
):
    for name, run, ws in [("a", "r1", "vision"), ("b", "r2", "vision"), ("c", "r1", "nlp")]:
        kube.create(sample("Job", name, labels={"taugrid.io/run-id": run, "taugrid.io/ws": ws}))

    both = kube.list(
        "batch/v1", "Job", "team-a", {"taugrid.io/run-id": "r1", "taugrid.io/ws": "nlp"}
    )
    assert [o["metadata"]["name"] for o in both.items] == ["c"]
    one = kube.list("batch/v1", "Job", "team-a", {"taugrid.io/run-id": "r1"})
    assert sorted(o["metadata"]["name"] for o in one.items) == ["a", "c"]
    assert kube.list("batch/v1", "Job", "team-a", {"taugrid.io/run-id": "r9"}).items == []
    assert len(kube.list("batch/v1", "Job", "team-a").items) == 3

    # The selector is sent too, so a real server filters before it answers.
    selectors = [r.params.get("labelSelector") for r in kube_emulator.requests("list")]
    assert selectors[:3] == [
        "taugrid.io/run-id=r1,taugrid.io/ws=nlp",
        "taugrid.io/run-id=r1",
        "taugrid.io/run-id=r9",
    ]


def test_list_across_namespaces_and_items_get_their_kind(
    kube: LightkubeClient, kube_emulator: KubeEmulator
):
    kube.create(sample("Job", "a", namespace="team-a"))
    kube.create(sample("Job", "b", namespace="team-b"))
    everywhere = kube.list("batch/v1", "Job", None)
    assert sorted(
        (o["metadata"]["namespace"], o["metadata"]["name"]) for o in everywhere.items
    ) == [
        ("team-a", "a"),
        ("team-b", "b"),
    ]
    assert kube_emulator.requests("list")[0].path == "/apis/batch/v1/jobs"
    # A real server leaves apiVersion and kind out of list items; the client puts them back.
    bare = {"metadata": {"name": "c", "namespace": "team-a"}}
    kube_emulator.put({"apiVersion": "batch/v1", "kind": "Job", **bare})
    kube_emulator.patch("batch/v1", "Job", "team-a", "c", {"apiVersion": None, "kind": None})
    items = {o["metadata"]["name"]: o for o in kube.list("batch/v1", "Job", "team-a").items}
    assert (items["c"]["apiVersion"], items["c"]["kind"]) == ("batch/v1", "Job")


def test_list_of_an_empty_kind_is_empty(kube: LightkubeClient):
    listed = kube.list("ray.io/v1", "RayJob", "team-a")
    assert listed.items == []


def test_delete_propagation_is_sent(kube: LightkubeClient, kube_emulator: KubeEmulator):
    kube.create(sample("Job", "d"))
    assert kube.delete(ObjectRef("batch/v1", "Job", "team-a", "d"), propagation="Background")
    assert kube_emulator.requests("delete")[0].params == {"propagationPolicy": "Background"}


def test_create_of_a_namespaced_kind_without_namespace_is_refused(kube: LightkubeClient):
    job = sample("Job", "nons")
    del job["metadata"]["namespace"]
    with pytest.raises(KubeError, match=r"create Job nons: metadata\.namespace is required"):
        kube.create(job)
