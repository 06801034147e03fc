"""Valid policies load, with shorthand, defaults, a stable hash, and a faithful dump."""

from __future__ import annotations

from pathlib import Path

import pytest
from policy_samples import ALL, MINIMAL, TWO_COHORTS

from taugrid.policy import (
    default_policy,
    dump_policy,
    load_policy,
    load_policy_text,
    policy_hash,
)
from taugrid.policy.models import STANDARD_PRIORITIES, CpuQuota, GpuQuota, MemoryQuota


@pytest.mark.parametrize("name", sorted(ALL))
def test_samples_load(tmp_path: Path, name: str) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(ALL[name])
    loaded = load_policy(path)
    assert loaded.source == str(path)
    assert loaded.text == ALL[name]
    assert loaded.policy_hash == policy_hash(loaded.policy)
    assert len(loaded.policy_hash) == 64


def test_bare_amounts_are_nominal_quotas_and_text_is_kept() -> None:
    policy = load_policy_text(MINIMAL).policy
    quotas = policy.cluster_queues[0].resources[0].quotas
    assert quotas.gpu == GpuQuota(nominal=4)
    assert quotas.cpu == CpuQuota(nominal="16")
    assert quotas.memory == MemoryQuota(nominal="64Gi")


def test_defaults_standard_priorities_kueue_preemption_and_first_queue() -> None:
    policy = load_policy_text(MINIMAL).policy
    assert policy.priority_classes == list(STANDARD_PRIORITIES)
    assert policy.default_priority.name == "normal"
    queue = policy.cluster_queues[0]
    assert queue.cohort is None
    assert queue.queueing_strategy == "BestEffortFIFO"
    assert (queue.preemption.within_cluster_queue, queue.preemption.reclaim_within_cohort) == (
        "Never",
        "Never",
    )
    assert policy.workspaces[0].default_local_queue == "default"
    assert policy.flavors[0].tolerate_taints is True


def test_hash_ignores_comments_layout_and_shorthand() -> None:
    spelled_out = """\
# The platform team's policy.
flavors: [{name: local}]
cluster_queues:
  - name: main
    resources:
      - flavor: local
        quotas:
          gpu: {nominal: 4}
          cpu: {nominal: "16"}
          memory: {nominal: 64Gi}
workspaces: [{name: default, local_queues: [{name: default, cluster_queue: main}]}]
priority_classes:
  - {name: low, value: 100, description: "Opportunistic work; preempted first."}
  - {name: normal, value: 1000, description: The default., default: true}
  - {name: high, value: 10000, description: "Urgent work; may preempt lower."}
"""
    assert load_policy_text(spelled_out).policy_hash == load_policy_text(MINIMAL).policy_hash
    changed = MINIMAL.replace("gpu: 4", "gpu: 5")
    assert load_policy_text(changed).policy_hash != load_policy_text(MINIMAL).policy_hash


@pytest.mark.parametrize("name", sorted(ALL))
def test_dump_loads_back_equal(name: str) -> None:
    policy = load_policy_text(ALL[name]).policy
    again = load_policy_text(dump_policy(policy), "dumped")
    assert again.policy == policy
    assert again.policy_hash == policy_hash(policy)


def test_default_policy_dumps_to_a_valid_policy_file() -> None:
    policy = default_policy(2, "h100", 8000, 32 * 2**30)
    assert load_policy_text(dump_policy(policy)).policy == policy


def test_two_cohorts_sample_reads_as_written() -> None:
    policy = load_policy_text(TWO_COHORTS).policy
    assert [c.name for c in policy.cohorts] == ["research", "production"]
    team_a = policy.cluster_queues[0]
    assert team_a.preemption.reclaim_within_cohort == "Any"
    assert team_a.resources[0].quotas.cpu == CpuQuota(
        nominal="96", borrowing_limit="48", lending_limit="1500m"
    )
    assert policy.workspaces[0].default_local_queue == "main"
    assert policy.workspaces[1].default_local_queue == "main"
    assert policy.default_priority.name == "standard"
