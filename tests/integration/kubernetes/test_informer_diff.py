"""The informer's pure parts: the difference of two caches, what one watch event changes in
a cache, and when a list's resourceVersion can be resumed from."""

from __future__ import annotations

from taugrid.executors.kubernetes.client import WatchEvent
from taugrid.executors.kubernetes.informer import Key, diff, key_of, reconcile, resume_version


def obj(name: str, ns: str | None = "a", rv: str | None = None, **spec: object) -> dict:
    meta: dict = {"name": name, "namespace": ns}
    if rv is not None:
        meta["resourceVersion"] = rv
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}


def cache(*objs: dict) -> dict[Key, dict]:
    return {key_of(o): o for o in objs}


def names(events: list[WatchEvent]) -> list[tuple[str, str]]:
    return [(e.type, e.object["metadata"]["name"]) for e in events]


def test_diff_of_equal_caches_is_nothing():
    assert diff(cache(obj("x", n=1)), cache(obj("x", n=1))) == []
    assert diff({}, {}) == []


def test_diff_adds_modifies_and_deletes_in_key_order():
    old = cache(obj("b", n=1), obj("d"), obj("c", n=1))
    new = cache(obj("a"), obj("b", n=2), obj("c", n=1))
    assert names(diff(old, new)) == [("ADDED", "a"), ("MODIFIED", "b"), ("DELETED", "d")]


def test_a_deleted_event_carries_the_last_known_object():
    last = obj("gone", n=7)
    (event,) = diff(cache(last), {})
    assert event == WatchEvent("DELETED", last)


def test_diff_orders_cluster_scoped_and_namespaced_keys():
    new = cache(obj("z", ns="b"), obj("y", ns=None), obj("x", ns="a"))
    assert [key_of(e.object) for e in diff({}, new)] == [(None, "y"), ("a", "x"), ("b", "z")]


def test_reconcile_turns_events_into_changes_of_the_cache():
    held = cache(obj("x", n=1))
    assert reconcile(held, WatchEvent("ADDED", obj("x", n=1))) is None  # a replay
    assert reconcile(held, WatchEvent("ADDED", obj("x", n=2))) == WatchEvent(
        "MODIFIED", obj("x", n=2)
    )
    assert reconcile(held, WatchEvent("MODIFIED", obj("x", n=1))) is None
    assert reconcile(held, WatchEvent("MODIFIED", obj("y"))) == WatchEvent("ADDED", obj("y"))
    assert reconcile(held, WatchEvent("DELETED", obj("y"))) is None  # never seen
    assert reconcile(held, WatchEvent("DELETED", obj("x", n=1))) == WatchEvent(
        "DELETED", obj("x", n=1)
    )
    assert reconcile(held, WatchEvent("BOOKMARK", {"metadata": {"resourceVersion": "9"}})) is None


def test_a_list_version_is_trusted_only_when_its_objects_carry_versions():
    assert resume_version([obj("x", rv="3")], "5") == "5"
    assert resume_version([], "5") == "5"
    assert resume_version([obj("x", rv="3"), obj("y")], "5") is None
    assert resume_version([obj("x", rv="3")], None) is None
    assert resume_version([obj("x", rv="3")], "") is None
