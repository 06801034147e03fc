"""Every kind of policy mistake is reported as file:line:col: field: message, all at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from taugrid.errors import SpecError
from taugrid.policy import load_policy, load_policy_text

HEAD = """\
flavors:
  - name: h100
cohorts:
  - name: research
"""
WORKSPACE = """\
workspaces:
  - name: team-a
    local_queues:
      - {name: main, cluster_queue: team-a}
"""


def problems(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as caught:
        load_policy(path)
    assert caught.value.exit_code == 2
    return [str(p).replace(str(path), "policy.yaml") for p in caught.value.problems]


def queue(body: str) -> str:
    return HEAD + "cluster_queues:\n" + body + WORKSPACE


def test_unknown_flavor_is_named_with_a_suggestion_and_the_declared_ones(tmp_path: Path) -> None:
    text = queue(
        "  - name: team-a\n    resources:\n      - flavor: h10\n        quotas: {gpu: 1}\n"
    )
    assert problems(tmp_path, text) == [
        "policy.yaml:8:17: cluster_queues[0].resources[0].flavor: unknown flavor 'h10', "
        "did you mean 'h100'? (flavors: h100)"
    ]


def test_a_queue_in_two_cohorts(tmp_path: Path) -> None:
    text = (
        HEAD
        + "  - name: production\n"
        + "cluster_queues:\n"
        + "  - name: team-a\n"
        + "    cohort: research\n"
        + "    resources: [{flavor: h100, quotas: {gpu: 1}}]\n"
        + "  - name: team-a\n"
        + "    cohort: production\n"
        + "    resources: [{flavor: h100, quotas: {gpu: 1}}]\n"
        + WORKSPACE
    )
    assert problems(tmp_path, text) == [
        "policy.yaml:10:11: cluster_queues[1].name: cluster queue 'team-a' is declared twice "
        "with different cohorts (cohort 'research' at line 7, cohort 'production' here); "
        "a queue belongs to one cohort"
    ]


def test_duplicate_names_in_every_list(tmp_path: Path) -> None:
    text = """\
flavors:
  - name: h100
  - name: h100
cohorts:
  - name: research
  - name: research
cluster_queues:
  - name: team-a
    resources: [{flavor: h100, quotas: {gpu: 1}}, {flavor: h100, quotas: {gpu: 2}}]
  - name: team-a
    resources: [{flavor: h100, quotas: {gpu: 1}}]
workspaces:
  - name: team-a
    local_queues:
      - {name: main, cluster_queue: team-a}
      - {name: main, cluster_queue: team-a}
  - name: team-a
    local_queues: [{name: main, cluster_queue: team-a}]
priority_classes:
  - {name: low, value: 1, default: true}
  - {name: low, value: 2}
"""
    assert problems(tmp_path, text) == [
        "policy.yaml:3:11: flavors[1].name: duplicate flavor 'h100' (first at line 2)",
        "policy.yaml:6:11: cohorts[1].name: duplicate cohort 'research' (first at line 5)",
        "policy.yaml:9:60: cluster_queues[0].resources[1].flavor: flavor 'h100' is listed twice "
        "in cluster queue 'team-a' (first at line 9)",
        "policy.yaml:10:11: cluster_queues[1].name: duplicate cluster queue 'team-a' "
        "(first at line 8)",
        "policy.yaml:16:16: workspaces[0].local_queues[1].name: duplicate local queue 'main' "
        "(first at line 15)",
        "policy.yaml:17:11: workspaces[1].name: duplicate workspace 'team-a' (first at line 13)",
        "policy.yaml:21:12: priority_classes[1].name: duplicate priority class 'low' "
        "(first at line 20)",
    ]


def test_same_local_queue_name_in_two_workspaces_is_fine(tmp_path: Path) -> None:
    text = queue("  - name: team-a\n    resources: [{flavor: h100, quotas: {gpu: 1}}]\n")
    text += "  - name: team-b\n    local_queues: [{name: main, cluster_queue: team-a}]\n"
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    assert len(load_policy(path).policy.workspaces) == 2


def test_negative_quotas_and_limits(tmp_path: Path) -> None:
    text = queue(
        "  - name: team-a\n"
        "    cohort: research\n"
        "    resources:\n"
        "      - flavor: h100\n"
        "        quotas:\n"
        "          gpu: -1\n"
        "          cpu: {nominal: '-500m', borrowing_limit: -2}\n"
        "          memory: {nominal: 1Gi, lending_limit: -1Gi}\n"
    )
    assert problems(tmp_path, text) == [
        "policy.yaml:11:16: cluster_queues[0].resources[0].quotas.gpu.nominal: "
        "must not be negative, got -1",
        "policy.yaml:12:26: cluster_queues[0].resources[0].quotas.cpu.nominal: "
        "must not be negative, got -500m",
        "policy.yaml:12:52: cluster_queues[0].resources[0].quotas.cpu.borrowing_limit: "
        "must not be negative, got -2",
        "policy.yaml:13:49: cluster_queues[0].resources[0].quotas.memory.lending_limit: "
        "must not be negative, got -1Gi",
    ]


def test_limits_without_a_cohort(tmp_path: Path) -> None:
    text = queue(
        "  - name: team-a\n"
        "    resources:\n"
        "      - flavor: h100\n"
        "        quotas:\n"
        "          gpu: {nominal: 8, borrowing_limit: 4, lending_limit: 2}\n"
    )
    assert problems(tmp_path, text) == [
        "policy.yaml:10:46: cluster_queues[0].resources[0].quotas.gpu.borrowing_limit: "
        "borrowing_limit needs a cohort: cluster queue 'team-a' has no cohort to borrow from "
        "(set its cohort, or remove the limit)",
        "policy.yaml:10:64: cluster_queues[0].resources[0].quotas.gpu.lending_limit: "
        "lending_limit needs a cohort: cluster queue 'team-a' has no cohort to lend to "
        "(set its cohort, or remove the limit)",
    ]


def test_lending_limit_above_nominal_in_each_unit(tmp_path: Path) -> None:
    text = queue(
        "  - name: team-a\n"
        "    cohort: research\n"
        "    resources:\n"
        "      - flavor: h100\n"
        "        quotas:\n"
        "          gpu: {nominal: 8, lending_limit: 9}\n"
        "          cpu: {nominal: 4, lending_limit: 4001m}\n"
        "          memory: {nominal: 1Gi, lending_limit: 1G}\n"
    )
    assert problems(tmp_path, text) == [
        "policy.yaml:11:44: cluster_queues[0].resources[0].quotas.gpu.lending_limit: "
        "lending_limit 9 is above the nominal quota 8; a queue can lend at most what it holds",
        "policy.yaml:12:44: cluster_queues[0].resources[0].quotas.cpu.lending_limit: "
        "lending_limit 4001m is above the nominal quota 4; a queue can lend at most what it holds",
    ]  # 1G (10**9 bytes) is below 1Gi (2**30): fine


def test_missing_cluster_queue_and_local_queue_references(tmp_path: Path) -> None:
    text = (
        HEAD
        + "cluster_queues:\n"
        + "  - name: team-a\n"
        + "    resources: [{flavor: h100, quotas: {gpu: 1}}]\n"
        + "workspaces:\n"
        + "  - name: team-a\n"
        + "    default_queue: mian\n"
        + "    local_queues:\n"
        + "      - {name: main, cluster_queue: team-b}\n"
    )
    assert problems(tmp_path, text) == [
        "policy.yaml:10:20: workspaces[0].default_queue: unknown local queue 'mian', "
        "did you mean 'main'? (local_queues: main)",
        "policy.yaml:12:37: workspaces[0].local_queues[0].cluster_queue: unknown cluster queue "
        "'team-b', did you mean 'team-a'? (cluster_queues: team-a)",
    ]


def test_unknown_cohort(tmp_path: Path) -> None:
    text = queue(
        "  - name: team-a\n"
        "    cohort: reserach\n"
        "    resources: [{flavor: h100, quotas: {gpu: 1}}]\n"
    )
    assert problems(tmp_path, text) == [
        "policy.yaml:7:13: cluster_queues[0].cohort: unknown cohort 'reserach', "
        "did you mean 'research'? (cohorts: research)"
    ]


def test_no_default_priority_class(tmp_path: Path) -> None:
    text = queue("  - name: team-a\n    resources: [{flavor: h100, quotas: {gpu: 1}}]\n")
    text += "priority_classes:\n  - {name: low, value: 1}\n  - {name: high, value: 2}\n"
    assert problems(tmp_path, text) == [
        "policy.yaml:12:1: priority_classes: no priority class is the default; "
        "mark exactly one with `default: true`"
    ]


def test_several_default_priority_classes(tmp_path: Path) -> None:
    text = queue("  - name: team-a\n    resources: [{flavor: h100, quotas: {gpu: 1}}]\n")
    text += (
        "priority_classes:\n"
        "  - {name: low, value: 1, default: true}\n"
        "  - {name: mid, value: 2, default: true}\n"
        "  - {name: high, value: 3, default: true}\n"
    )
    assert problems(tmp_path, text) == [
        "policy.yaml:14:36: priority_classes[1].default: only one priority class can be the "
        "default; 'low' (line 13) already is",
        "policy.yaml:15:37: priority_classes[2].default: only one priority class can be the "
        "default; 'low' (line 13) already is",
    ]


def test_invalid_dns_names_everywhere(tmp_path: Path) -> None:
    text = """\
flavors:
  - name: H100
cohorts:
  - name: research_
cluster_queues:
  - name: team.a
    resources: [{flavor: H100, quotas: {gpu: 1}}]
workspaces:
  - name: -team
    local_queues: [{name: Main, cluster_queue: team.a}]
priority_classes:
  - name: very-long-name-that-goes-on-and-on-and-on-for-more-than-63-chars
    value: 1
    default: true
"""
    dns = (
        "is not a DNS-1123 name: lowercase letters, digits and '-', starting and ending "
        "with a letter or digit, at most 63 characters"
    )
    assert problems(tmp_path, text) == [
        f"policy.yaml:2:11: flavors[0].name: 'H100' {dns}",
        f"policy.yaml:4:11: cohorts[0].name: 'research_' {dns}",
        f"policy.yaml:6:11: cluster_queues[0].name: 'team.a' {dns}",
        f"policy.yaml:7:26: cluster_queues[0].resources[0].flavor: 'H100' {dns}",
        f"policy.yaml:9:11: workspaces[0].name: '-team' {dns}",
        f"policy.yaml:10:27: workspaces[0].local_queues[0].name: 'Main' {dns}",
        f"policy.yaml:10:48: workspaces[0].local_queues[0].cluster_queue: 'team.a' {dns}",
        "policy.yaml:12:11: priority_classes[0].name: "
        f"'very-long-name-that-goes-on-and-on-and-on-for-more-than-63-chars' {dns}",
    ]


def test_every_problem_at_once_in_file_order(tmp_path: Path) -> None:
    text = """\
flavors:
  - name: h100
    taints: [{key: nvidia.com/gpu, effect: NoSchedul}]
cluster_queues:
  - name: team-a
    queueing_strategy: FIFO
    resources:
      - flavor: a100
        quotas:
          gpu: {nominal: -8, borrowing_limit: 2}
          gpus: 1
workspaces:
  - name: team-a
    local_queues: [{name: main, cluster_queue: team-b}]
priority_classes:
  - {name: low, value: 1}
"""
    assert problems(tmp_path, text) == [
        "policy.yaml:3:44: flavors[0].taints[0].effect: unknown value 'NoSchedul', "
        "did you mean 'NoSchedule'? (one of: NoSchedule, PreferNoSchedule, NoExecute)",
        "policy.yaml:6:24: cluster_queues[0].queueing_strategy: unknown value 'FIFO' "
        "(one of: StrictFIFO, BestEffortFIFO)",
        "policy.yaml:8:17: cluster_queues[0].resources[0].flavor: unknown flavor 'a100', "
        "did you mean 'h100'? (flavors: h100)",
        "policy.yaml:10:26: cluster_queues[0].resources[0].quotas.gpu.nominal: "
        "must not be negative, got -8",
        "policy.yaml:10:47: cluster_queues[0].resources[0].quotas.gpu.borrowing_limit: "
        "borrowing_limit needs a cohort: cluster queue 'team-a' has no cohort to borrow from "
        "(set its cohort, or remove the limit)",
        "policy.yaml:11:11: cluster_queues[0].resources[0].quotas.gpus: unknown field 'gpus', "
        "did you mean 'gpu'?",
        "policy.yaml:14:48: workspaces[0].local_queues[0].cluster_queue: unknown cluster queue "
        "'team-b', did you mean 'team-a'? (cluster_queues: team-a)",
        "policy.yaml:15:1: priority_classes: no priority class is the default; "
        "mark exactly one with `default: true`",
    ]


def test_flavors_of_a_queue_must_cover_the_same_resources(tmp_path: Path) -> None:
    text = """\
flavors: [{name: h100}, {name: cpu}]
cluster_queues:
  - name: team-a
    resources:
      - flavor: h100
        quotas: {gpu: 8, cpu: 64}
      - flavor: cpu
        quotas: {cpu: 256, memory: 1Ti}
workspaces: [{name: team-a, local_queues: [{name: main, cluster_queue: team-a}]}]
"""
    assert problems(tmp_path, text) == [
        "policy.yaml:6:17: cluster_queues[0].resources[0].quotas: flavor 'h100' sets no memory "
        "quota but other flavors of cluster queue 'team-a' do; Kueue needs every flavor of a "
        "queue to cover the same resources (write memory: 0)",
        "policy.yaml:8:17: cluster_queues[0].resources[1].quotas: flavor 'cpu' sets no gpu "
        "quota but other flavors of cluster queue 'team-a' do; Kueue needs every flavor of a "
        "queue to cover the same resources (write gpu: 0)",
    ]


def test_bad_values_and_shapes(tmp_path: Path) -> None:
    text = """\
flavors:
  - name: h100
    gpu_type: ""
    node_labels: {"bad key!": x, ok: "not ok"}
    taints: [{key: k, value: v, effect: NoSchedule, operator: Equal}]
    tolerate_taints: "yes"
cluster_queues:
  - name: team-a
    preemption: {within_cluster_queue: Always}
    resources:
      - flavor: h100
        quotas:
          gpu: 1.5
          cpu: fast
          memory: 512m
      - flavor: h100
        quotas: {}
workspaces:
  - name: team-a
    local_queues: []
    user_limits: {max_running_runs: -1, max_gpus: "4"}
priority_classes:
  - {name: low, value: 3000000000, default: true}
"""
    assert problems(tmp_path, text) == [
        "policy.yaml:3:15: flavors[0].gpu_type: must not be empty",
        "policy.yaml:4:19: flavors[0].node_labels.bad key!: 'bad key!' is not a Kubernetes label "
        "key: an optional DNS prefix and '/', then at most 63 letters, digits, '-', '_' or '.', "
        "starting and ending alphanumeric",
        "policy.yaml:4:38: flavors[0].node_labels.ok: 'not ok' is not a Kubernetes label value: "
        "at most 63 letters, digits, '-', '_' or '.', starting and ending alphanumeric",
        "policy.yaml:5:53: flavors[0].taints[0].operator: unknown field 'operator' "
        "(allowed: key, value, effect)",
        "policy.yaml:6:22: flavors[0].tolerate_taints: must be true or false, got a string",
        "policy.yaml:9:40: cluster_queues[0].preemption.within_cluster_queue: unknown value "
        "'Always' (one of: Never, LowerPriority, LowerOrNewerEqualPriority)",
        "policy.yaml:13:16: cluster_queues[0].resources[0].quotas.gpu.nominal: "
        "must be an integer, got a number 1.5",
        "policy.yaml:14:16: cluster_queues[0].resources[0].quotas.cpu.nominal: "
        "'fast' is not CPU cores such as 4, 0.5 or \"500m\" (millicores)",
        "policy.yaml:15:19: cluster_queues[0].resources[0].quotas.memory.nominal: "
        "'512m' means 0.512 bytes; did you mean 512Mi or 512M?",
        "policy.yaml:16:17: cluster_queues[0].resources[1].flavor: flavor 'h100' is listed "
        "twice in cluster queue 'team-a' (first at line 11)",
        "policy.yaml:17:17: cluster_queues[0].resources[1].quotas: "
        "set a quota for at least one of gpu, cpu, memory",
        "policy.yaml:20:19: workspaces[0].local_queues: must list at least one entry",
        "policy.yaml:21:37: workspaces[0].user_limits.max_running_runs: must be at least 0, got -1",
        "policy.yaml:21:51: workspaces[0].user_limits.max_gpus: must be an integer, "
        "got a string '4'",
        "policy.yaml:23:24: priority_classes[0].value: must be at most 2147483647, got 3000000000",
    ]


def test_missing_sections_point_at_the_top(tmp_path: Path) -> None:
    assert problems(tmp_path, "cohorts: []\nflavor: []\n") == [
        "policy.yaml:1:1: flavors: required field is missing",
        "policy.yaml:1:1: cluster_queues: required field is missing",
        "policy.yaml:1:1: workspaces: required field is missing",
        "policy.yaml:2:1: flavor: unknown field 'flavor', did you mean 'flavors'?",
    ]


def test_missing_fields_point_at_their_entry(tmp_path: Path) -> None:
    text = queue("  - name: team-a\n    resources:\n      - quotas: {gpu: 1}\n")
    assert problems(tmp_path, text) == [
        "policy.yaml:8:9: cluster_queues[0].resources[0].flavor: required field is missing",
    ]


def test_yaml_level_problems(tmp_path: Path) -> None:
    assert problems(tmp_path, "") == [
        "policy.yaml:1:1: file is empty; a policy needs flavors, cluster_queues and workspaces "
        "(see docs/policy.md)"
    ]
    assert problems(tmp_path, "- flavors\n") == [
        "policy.yaml:1:1: must be a mapping of sections (flavors: ...)"
    ]
    [bad] = problems(tmp_path, "flavors: [\n")
    assert bad.startswith("policy.yaml:2:1: invalid YAML:")
    text = queue("  - name: team-a\n    resources: [{flavor: h100, quotas: {gpu: 1}}]\n")
    assert problems(tmp_path, text.replace("cohorts:", "flavors: []\ncohorts:")) == [
        "policy.yaml:3:1: flavors: duplicate key 'flavors' (first at line 1)"
    ]


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as caught:
        load_policy(tmp_path / "nope.yaml")
    assert str(caught.value.problems[0]).startswith(f"{tmp_path / 'nope.yaml'}: cannot read:")
    binary = tmp_path / "policy.yaml"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(SpecError) as caught:
        load_policy(binary)
    assert str(caught.value.problems[0]) == f"{binary}: is not UTF-8 text"


def test_text_from_elsewhere_is_named_by_its_source() -> None:
    with pytest.raises(SpecError) as caught:
        load_policy_text("flavors: 3\n", "server:policy.yaml")
    assert "server:policy.yaml:1:10: flavors: must be a list, got an integer 3" in [
        str(p) for p in caught.value.problems
    ]
