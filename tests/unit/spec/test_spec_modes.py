"""spec/modes.py: the one table of what each mode refuses at submit and what it ignores."""

from __future__ import annotations

from typing import Any

import pytest

from taugrid.spec import TauSpec
from taugrid.spec.modes import (
    CLUSTER,
    LOCAL,
    LOCAL_WITHOUT_RAY,
    Capabilities,
    inactive_fields,
    refusal,
    refusals,
)

NODES_LOCAL = (
    "nodes: 9: local mode runs at most 8 nodes, all on this one machine; more need the "
    "Kubernetes mode (use nodes: 8 or fewer)"
)
# Without Ray beside the server (LOCAL runs it: tests/unit/executors/test_raydriver.py).
RAY_LOCAL = (
    "launcher: ray needs Ray installed beside the server: pip install 'taugrid[ray]' in the "
    "server's environment, then restart the server (or use command or torchrun)"
)
IMAGE_LOCAL = (
    "image: x/y:1 has no effect in local mode (local mode runs in the submitter's environment)"
)


def spec(**fields: Any) -> TauSpec:
    return TauSpec.model_validate({"name": "a", "command": "x", **fields})


def test_local_refuses_nodes_and_ray_and_ignores_image() -> None:
    s = spec(nodes=9, launcher="ray", image="x/y:1")
    assert refusals(s, LOCAL_WITHOUT_RAY) == [NODES_LOCAL, RAY_LOCAL]
    # the server's UsageError
    assert refusal(s, LOCAL_WITHOUT_RAY) == f"{NODES_LOCAL}; {RAY_LOCAL}"
    assert inactive_fields(s, LOCAL) == [IMAGE_LOCAL]
    assert refusals(s, "local") == refusals(s, LOCAL)  # a mode's name still works
    assert inactive_fields(s, "local") == [IMAGE_LOCAL]


@pytest.mark.parametrize("launcher", ["command", "torchrun"])
def test_local_runs_up_to_eight_nodes(launcher: str) -> None:
    for nodes in (2, LOCAL.max_nodes):
        assert refusals(spec(nodes=nodes, launcher=launcher), LOCAL) == []
    assert LOCAL.max_nodes == 8


def test_a_server_of_one_node_still_says_so() -> None:
    """An older local server answers max_nodes 1: the CLI says it in its words."""
    one = Capabilities.from_dict({"mode": "local", "max_nodes": 1})
    assert refusals(spec(nodes=2), one) == [
        "nodes: 2: local mode runs on one machine; multi-node runs need the Kubernetes mode "
        "(use nodes: 1, or launcher: torchrun with several processes)"
    ]


def test_cluster_accepts_them_up_to_its_node_cap() -> None:
    s = spec(nodes=2, launcher="ray", image="x/y:1")
    assert refusals(s, CLUSTER) == [] and refusal(s, CLUSTER) is None
    assert inactive_fields(s, CLUSTER) == []
    over = spec(nodes=CLUSTER.max_nodes + 1)
    assert refusals(over, CLUSTER) == [
        f"nodes: {CLUSTER.max_nodes + 1}: cluster mode runs at most {CLUSTER.max_nodes} "
        f"nodes a run on this server (use nodes: {CLUSTER.max_nodes} or fewer)"
    ]
    assert refusals(spec(nodes=CLUSTER.max_nodes), CLUSTER) == []


@pytest.mark.parametrize("launcher", ["command", "torchrun"])
def test_plain_specs_pass_everywhere(launcher: str) -> None:
    s = spec(launcher=launcher)
    for caps in (LOCAL, CLUSTER):
        assert refusals(s, caps) == [] and inactive_fields(s, caps) == []


def test_the_sentences_follow_the_capabilities() -> None:
    small = Capabilities("cluster", max_nodes=4, launchers=frozenset({"command"}), images=False)
    s = spec(nodes=5, launcher="torchrun", image="x/y:1")
    assert refusals(s, small) == [
        "nodes: 5: cluster mode runs at most 4 nodes a run on this server (use nodes: 4 or fewer)",
        "launcher: torchrun is not supported in cluster mode yet; use command",
    ]
    assert inactive_fields(s, small) == [
        "image: x/y:1 has no effect in cluster mode "
        "(cluster mode runs in the submitter's environment)"
    ]


def test_wire_round_trip_and_tolerance() -> None:
    for caps in (LOCAL, CLUSTER):
        assert Capabilities.from_dict(caps.to_dict()) == caps
    assert LOCAL.to_dict() == {
        "mode": "local",
        "max_nodes": 8,
        "launchers": ["command", "ray", "torchrun"],
        "images": False,
    }
    # An older server answers nothing: local mode. Unknown keys are ignored; what is
    # missing or malformed is the mode's default.
    assert Capabilities.from_dict(None) == LOCAL
    assert Capabilities.from_dict({}) == LOCAL
    assert Capabilities.from_dict({"mode": "cluster", "gpus": 8}) == CLUSTER
    assert Capabilities.from_dict({"mode": "cluster", "max_nodes": 8}).max_nodes == 8
    odd = Capabilities.from_dict({"mode": "x", "max_nodes": True, "launchers": "ray", "images": 1})
    assert odd == LOCAL
