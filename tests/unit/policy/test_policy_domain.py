"""The built-in default policy, and policies as the scheduler's integer quotas."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from policy_samples import TAINTS, TWO_COHORTS

from taugrid.domain import quota
from taugrid.policy import DomainPolicy, default_policy, dump_policy, load_policy_text, to_domain
from taugrid.policy.quantities import cpu_millis, format_cpu, format_memory, memory_bytes

GI = 2**30


def test_default_policy_is_one_queue_over_the_machine() -> None:
    policy = default_policy(4, "h100", 16_000, 64 * GI)
    assert [(f.name, f.gpu_type) for f in policy.flavors] == [("local", "h100")]
    assert policy.cohorts == []
    [queue] = policy.cluster_queues
    assert (queue.name, queue.cohort) == ("default", None)
    assert queue.preemption.within_cluster_queue == "LowerPriority"
    assert queue.preemption.reclaim_within_cohort == "Never"
    [(ws, lq)] = [(w.name, w.local_queues) for w in policy.workspaces]
    assert ws == "default"
    assert [(q.name, q.cluster_queue) for q in lq] == [("default", "default")]
    assert [(p.name, p.value, p.default) for p in policy.priority_classes] == [
        ("low", 100, False),
        ("normal", 1000, True),
        ("high", 10000, False),
    ]

    domain = to_domain(policy)
    assert domain.queues["default"] == quota.ClusterQueue(
        name="default",
        flavors=(
            quota.FlavorQuotas(
                flavor="local",
                resources={
                    "gpu": quota.ResourceQuota(4),
                    "cpu": quota.ResourceQuota(16_000),
                    "memory": quota.ResourceQuota(64 * GI),
                },
            ),
        ),
        cohort=None,
        strategy="BestEffortFIFO",
        within_cluster_queue="LowerPriority",
        reclaim_within_cohort="Never",
    )
    assert domain.flavors == {"local": quota.Flavor("local", "h100", {}, ())}
    assert domain.priorities == {"low": 100, "normal": 1000, "high": 10000}
    assert domain.default_priority == "normal"
    assert domain.local_queues == {("default", "default"): "default"}
    assert domain.default_queue == {"default": "default"}
    assert domain.user_limits == {}


def test_default_policy_without_gpus_or_gpu_type() -> None:
    domain = to_domain(default_policy(0, None, 1500, 1_000_000_000))
    assert domain.flavors["local"].gpu_type is None
    resources = domain.queues["default"].flavors[0].resources
    assert {r: q.nominal for r, q in resources.items()} == {
        "gpu": 0,
        "cpu": 1500,
        "memory": 1_000_000_000,
    }


@given(
    gpus=st.integers(0, 1024),
    cpus=st.integers(0, 10**7),
    memory=st.integers(0, 2**62),
)
def test_default_policy_keeps_exact_machine_amounts(gpus: int, cpus: int, memory: int) -> None:
    policy = default_policy(gpus, None, cpus, memory)
    for candidate in (policy, load_policy_text(dump_policy(policy)).policy):
        resources = to_domain(candidate).queues["default"].flavors[0].resources
        assert (resources["gpu"].nominal, resources["cpu"].nominal) == (gpus, cpus)
        assert resources["memory"].nominal == memory


def test_default_policy_refuses_negative_amounts() -> None:
    with pytest.raises(ValueError, match="cpus_millis must not be negative"):
        default_policy(1, None, -1, 0)


def test_to_domain_converts_units_limits_and_names() -> None:
    domain = to_domain(load_policy_text(TWO_COHORTS).policy)
    assert isinstance(domain, DomainPolicy)
    team_a = domain.queues["team-a"]
    assert (team_a.cohort, team_a.strategy) == ("research", "StrictFIFO")
    assert (team_a.within_cluster_queue, team_a.reclaim_within_cohort) == ("LowerPriority", "Any")
    assert [f.flavor for f in team_a.flavors] == ["h100", "a100"]
    h100 = team_a.flavors[0].resources
    assert h100["gpu"] == quota.ResourceQuota(8, borrowing_limit=4, lending_limit=2)
    assert h100["cpu"] == quota.ResourceQuota(96_000, borrowing_limit=48_000, lending_limit=1500)
    assert h100["memory"] == quota.ResourceQuota(
        2**40, borrowing_limit=512 * GI, lending_limit=64 * 10**9
    )
    assert team_a.flavors[1].resources == {
        "gpu": quota.ResourceQuota(0),
        "cpu": quota.ResourceQuota(0),
        "memory": quota.ResourceQuota(0),
    }
    team_b = domain.queues["team-b"].flavors[0].resources
    assert team_b["cpu"].nominal == 500
    assert team_b["memory"].nominal == 2_000_000_000
    assert domain.queues["serving"].flavors[0].resources == {
        "gpu": quota.ResourceQuota(4, borrowing_limit=0)
    }
    batch = domain.queues["batch"]
    assert (batch.strategy, batch.within_cluster_queue) == ("BestEffortFIFO", "Never")

    assert domain.flavors["h100"] == quota.Flavor(
        "h100", "h100", {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, ()
    )
    assert domain.priorities == {"preemptible": -10, "standard": 500, "critical": 2_000_000_000}
    assert domain.default_priority == "standard"
    assert domain.local_queues == {
        ("team-a", "urgent"): "team-a",
        ("team-a", "main"): "team-a",
        ("team-b", "main"): "team-b",
        ("team-b", "serving"): "serving",
        ("team-b", "batch"): "batch",
    }
    assert domain.default_queue == {"team-a": "main", "team-b": "main"}
    assert domain.user_limits == {
        "team-a": quota.UserLimit(max_running=4, max_gpus=8),
        "team-b": quota.UserLimit(max_running=None, max_gpus=4),
    }


def test_to_domain_keeps_taints() -> None:
    domain = to_domain(load_policy_text(TAINTS).policy)
    assert domain.flavors["h100-spot"].taints == (
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
        {"key": "cloud.example.com/spot", "effect": "NoExecute"},
        {"key": "dedicated", "value": "ml", "effect": "PreferNoSchedule"},
    )
    assert [f.flavor for f in domain.queues["gpu"].flavors] == ["h100-reserved", "h100-spot"]


@pytest.mark.parametrize(
    ("text", "millis"),
    [("4", 4000), ("500m", 500), ("0.5", 500), ("0.1", 100), ("1.5k", 1_500_000), ("0", 0)],
)
def test_cpu_amounts(text: str, millis: int) -> None:
    assert cpu_millis(text) == millis


def test_cpu_numbers_from_yaml() -> None:
    assert (cpu_millis(4), cpu_millis(0.25), cpu_millis(0.1)) == (4000, 250, 100)


@pytest.mark.parametrize(
    ("text", "size"),
    [("64Gi", 64 * GI), ("1G", 10**9), ("0", 0), ("512Mi", 512 * 2**20), ("1e3", 1000)],
)
def test_memory_amounts(text: str, size: int) -> None:
    assert memory_bytes(text) == size


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (0, "0"),
        (64 * GI, "64Gi"),
        (64 * 10**9, "64G"),
        (1536 * 2**20, "1536Mi"),
        (1000, "1k"),
        (1024, "1Ki"),
        (1023, "1023"),
    ],
)
def test_memory_is_rendered_in_its_shortest_exact_form(size: int, text: str) -> None:
    assert format_memory(size) == text
    assert memory_bytes(text) == size


@given(st.integers(0, 2**63))
def test_memory_format_round_trips(size: int) -> None:
    assert memory_bytes(format_memory(size)) == size


@given(st.integers(0, 10**9))
def test_cpu_format_round_trips(millis: int) -> None:
    assert cpu_millis(format_cpu(millis)) == millis
