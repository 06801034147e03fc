"""policy.yaml texts shared by the policy tests: each is valid and exercises something."""

from __future__ import annotations

MINIMAL = """\
flavors:
  - name: local
cluster_queues:
  - name: main
    resources:
      - flavor: local
        quotas: {gpu: 4, cpu: 16, memory: 64Gi}
workspaces:
  - name: default
    local_queues:
      - {name: default, cluster_queue: main}
"""

# Two cohorts; borrowing and lending limits on every resource; preemption settings.
TWO_COHORTS = """\
flavors:
  - name: h100
    gpu_type: h100
    node_labels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}
  - name: a100
    gpu_type: a100
    node_labels: {nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB}
cohorts:
  - name: research
  - name: production
cluster_queues:
  - name: team-a
    cohort: research
    queueing_strategy: StrictFIFO
    preemption:
      within_cluster_queue: LowerPriority
      reclaim_within_cohort: Any
    resources:
      - flavor: h100
        quotas:
          gpu: {nominal: 8, borrowing_limit: 4, lending_limit: 2}
          cpu: {nominal: "96", borrowing_limit: 48, lending_limit: "1500m"}
          memory: {nominal: 1Ti, borrowing_limit: 512Gi, lending_limit: 64G}
      - flavor: a100
        quotas: {gpu: 0, cpu: 0, memory: 0}
  - name: team-b
    cohort: research
    preemption:
      within_cluster_queue: LowerOrNewerEqualPriority
      reclaim_within_cohort: LowerPriority
    resources:
      - flavor: a100
        quotas:
          gpu: {nominal: 16, lending_limit: 16}
          cpu: 0.5
          memory: 2000000000
  - name: serving
    cohort: production
    resources:
      - flavor: h100
        quotas: {gpu: {nominal: 4, borrowing_limit: 0}}
  - name: batch
    cohort: production
    queueing_strategy: BestEffortFIFO
    preemption: {within_cluster_queue: Never, reclaim_within_cohort: Never}
    resources:
      - flavor: h100
        quotas: {gpu: {nominal: 4, lending_limit: 4}}
workspaces:
  - name: team-a
    default_queue: main
    local_queues:
      - {name: urgent, cluster_queue: team-a}
      - {name: main, cluster_queue: team-a}
    user_limits: {max_running_runs: 4, max_gpus: 8}
  - name: team-b
    local_queues:
      - {name: main, cluster_queue: team-b}
      - {name: serving, cluster_queue: serving}
      - {name: batch, cluster_queue: batch}
    user_limits: {max_gpus: 4}
priority_classes:
  - {name: preemptible, value: -10, description: "Runs only on spare capacity."}
  - {name: standard, value: 500, default: true}
  - {name: critical, value: 2000000000, description: "Pages someone when it waits."}
"""

# Tainted GPU nodes: with and without a value, tolerated by Kueue or not.
TAINTS = """\
flavors:
  - name: h100-spot
    gpu_type: h100
    node_labels:
      cloud.example.com/instance-type: p5.48xlarge
      cloud.example.com/capacity: spot
    taints:
      - {key: nvidia.com/gpu, value: present, effect: NoSchedule}
      - {key: cloud.example.com/spot, effect: NoExecute}
      - {key: dedicated, value: ml, effect: PreferNoSchedule}
  - name: h100-reserved
    gpu_type: h100
    taints:
      - {key: nvidia.com/gpu, value: present, effect: NoSchedule}
    tolerate_taints: false
cluster_queues:
  - name: gpu
    resources:
      - flavor: h100-reserved
        quotas: {gpu: 8}
      - flavor: h100-spot
        quotas: {gpu: 32}
workspaces:
  - name: ml
    local_queues:
      - {name: gpu, cluster_queue: gpu}
"""

ALL = {"minimal": MINIMAL, "two-cohorts": TWO_COHORTS, "taints": TAINTS}
