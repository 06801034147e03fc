"""The built-in policy gives every workspace the server knows the built-in queue, and it
reads back as the policy.yaml that `tau admin policy render` shows."""

from __future__ import annotations

from taugrid.policy import default_policy, dump_policy, load_policy_text, to_domain


def test_every_known_workspace_gets_local_queue_default() -> None:
    pol = to_domain(default_policy(2, None, 4000, 2**30, ["vision", "default", "nlp"]))
    assert pol.local_queues == {
        ("default", "default"): "default",
        ("nlp", "default"): "default",
        ("vision", "default"): "default",
    }
    assert pol.default_queue == {"default": "default", "nlp": "default", "vision": "default"}
    assert [w for w, _ in to_domain(default_policy(0, None, 1000, 1)).local_queues] == ["default"]


def test_the_builtin_written_as_policy_yaml_loads_back_the_same() -> None:
    pol = default_policy(3, "h100", 1500, 64 * 2**30, ["alpha"])
    assert load_policy_text(dump_policy(pol), "built-in").policy == pol
