"""A real ``tau server --executor kubernetes`` against the emulator, with the test playing
Kueue, the Job controller and the kubelet (tests/kueue_player.py): what a researcher's
commands show at each step, and what the cluster holds."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tauproc import TAU, Tau

from kube_emulator import KubeEmulator
from kueue_player import KueuePlayer, wait_for

SPEC = """\
name: {name}
image: python:3.12-slim
command: python train.py
resources:
  cpus: 1
  memory: 1Gi
restart:
  max: 2
"""


@pytest.fixture
def cluster(tau: Tau, kube_emulator: KubeEmulator, tmp_path: Path) -> Iterator[KueuePlayer]:
    config = kube_emulator.write_kubeconfig(tmp_path / "kubeconfig")
    tau.extra_env["TAU_KUEUE_POSITIONS_S"] = "0.2"  # Kueue's visibility API, often
    player = KueuePlayer(kube_emulator)
    player.server_args = ("--executor", "kubernetes", "--kubeconfig", str(config))
    tau.start_server(*player.server_args)
    yield player
    tau("server", "stop", timeout=30)  # before the emulator: its watches end first


def submit(tau: Tau, name: str, spec: str = SPEC) -> str:
    (tau.cwd / "tau.yaml").write_text(spec.format(name=name))
    (tau.cwd / "train.py").write_text("print('hello')\n")
    run: dict[str, Any] = tau.json("run")["run"]
    return str(run["id"])


def state(tau: Tau, run_id: str) -> str:
    return str(tau.json("status", run_id)["state"])


def test_a_run_goes_from_kueue_admission_to_success(tau: Tau, cluster: KueuePlayer) -> None:
    run_id = submit(tau, "hello")
    job = cluster.wait_job(run_id)
    # Created suspended with Kueue's labels; nothing else is running it.
    assert job["spec"]["suspend"] is True
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]
    assert state(tau, run_id) == "QUEUED"
    cluster.make_workload(job)
    wait_for(
        "the pending reason from Kueue",
        lambda: "insufficient unused quota" in str(tau.json("status", run_id)),
    )
    cluster.admit(job)
    tau.wait_state(run_id, {"ADMITTED"})
    job = cluster.wait_job(run_id)
    (pod,) = cluster.make_pods(job)
    cluster.pod_running(pod)
    tau.wait_state(run_id, {"RUNNING"})
    cluster.pod_exited(pod, 0)
    cluster.finish_job(job)
    tau.wait_state(run_id, {"SUCCEEDED"})
    # The finished attempt's objects are deleted (pods by the foreground deletion).
    wait_for("the Job deleted", lambda: cluster.job(job["metadata"]["name"]) is None)


def admitted_and_running(tau: Tau, cluster: KueuePlayer, run_id: str, attempt: int = 0) -> Any:
    """Kueue admits the attempt's Job, its pod runs: the run is RUNNING."""
    job = cluster.wait_job(run_id, attempt)
    cluster.make_workload(job)
    cluster.admit(job)
    job = cluster.wait_job(run_id, attempt)
    (pod,) = cluster.make_pods(job)
    cluster.pod_running(pod)
    tau.wait_state(run_id, {"RUNNING"})
    return job, pod


def events(tau: Tau, run_id: str) -> list[str]:
    return [f"{e['reason']}: {e['message']}" for e in tau.json("status", run_id)["events"]]


def test_a_kueue_preemption_requeues_the_run_as_a_new_attempt_object(
    tau: Tau, cluster: KueuePlayer
) -> None:
    run_id = submit(tau, "preempted")
    job, _pod = admitted_and_running(tau, cluster, run_id)
    cluster.evict(job)
    # TauGrid deletes the evicted attempt's objects and creates the next attempt's:
    # never by toggling suspend on the old Job.
    wait_for("attempt 0's Job deleted", lambda: cluster.job(f"{run_id}-a0") is None)
    tau.wait_state(run_id, {"QUEUED"})
    job1 = cluster.wait_job(run_id, 1)
    assert job1["spec"]["suspend"] is True
    said = events(tau, run_id)
    assert any("preempted by Kueue (InClusterQueue)" in e for e in said), said
    cluster.make_workload(job1)
    cluster.admit(job1)
    (pod,) = cluster.make_pods(cluster.wait_job(run_id, 1))
    cluster.pod_running(pod)
    cluster.pod_exited(pod, 0)
    cluster.finish_job(cluster.wait_job(run_id, 1))
    run = tau.wait_state(run_id, {"SUCCEEDED"})
    # A preemption is not a failure: no restart of the budget was used.
    assert run["restarts"] == 0 and run["attempts"] == 2


def test_an_oom_killed_pod_fails_the_attempt_as_an_oom(tau: Tau, cluster: KueuePlayer) -> None:
    run_id = submit(tau, "hog", SPEC.replace("max: 2", "max: 0"))
    job, pod = admitted_and_running(tau, cluster, run_id)
    cluster.pod_exited(pod, 137, "OOMKilled")
    cluster.finish_job(job, failed="BackoffLimitExceeded")
    run = tau.wait_state(run_id, {"FAILED"})
    detail = tau.json("status", run_id)
    (attempt,) = detail["attempt_list"]
    assert attempt["failure_class"] == "oom", attempt
    assert run["exit_code"] == 137


def test_cancel_while_queued_deletes_the_objects_made_for_kueue(
    tau: Tau, cluster: KueuePlayer
) -> None:
    run_id = submit(tau, "never")
    cluster.wait_job(run_id)
    tau("cancel", run_id, check=True)
    tau.wait_state(run_id, {"CANCELLED"})
    wait_for("the Job deleted", lambda: cluster.job(f"{run_id}-a0") is None)
    wait_for(
        "the code token's Secret deleted",
        lambda: cluster.emu.get("v1", "Secret", "default", f"{run_id}-a0-code") is None,
    )


def test_cancel_while_running_waits_for_the_pods_to_go(tau: Tau, cluster: KueuePlayer) -> None:
    run_id = submit(tau, "stopped")
    admitted_and_running(tau, cluster, run_id)
    tau("cancel", "--no-wait", run_id, check=True)
    wait_for("the Job deleted", lambda: cluster.job(f"{run_id}-a0") is None)
    # The pod is still there (terminating): the run has not ended yet.
    assert tau.json("status", run_id)["state"] == "RUNNING"
    assert cluster.collect_garbage() == 1
    tau.wait_state(run_id, {"CANCELLED"})


def test_a_pod_that_cannot_start_fails_the_attempt_in_the_kubelets_words(
    tau: Tau, cluster: KueuePlayer
) -> None:
    run_id = submit(tau, "badimage", SPEC.replace("max: 2", "max: 0"))
    job = cluster.wait_job(run_id)
    cluster.make_workload(job)
    cluster.admit(job)
    (pod,) = cluster.make_pods(cluster.wait_job(run_id))
    cluster.pod_waiting(pod, "InvalidImageName", 'couldn\'t parse image name "python:::"')
    tau.wait_state(run_id, {"FAILED"})
    detail = tau.json("status", run_id)
    assert "InvalidImageName" in detail["message"], detail["message"]
    wait_for("the failed attempt's Job deleted", lambda: cluster.job(f"{run_id}-a0") is None)


def test_phases_are_shown_apart_while_the_run_starts(tau: Tau, cluster: KueuePlayer) -> None:
    run_id = submit(tau, "phases")
    job = cluster.wait_job(run_id)
    cluster.make_workload(job)
    cluster.admit(job)
    tau.wait_state(run_id, {"ADMITTED"})
    wait_for(
        "admitted, waiting for pods",
        lambda: "Job controller" in (tau.json("status", run_id).get("progress") or ""),
    )
    (pod,) = cluster.make_pods(cluster.wait_job(run_id))
    cluster.emu.put(
        {
            **pod,
            "status": {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.",
                    }
                ],
            },
        }
    )
    wait_for(
        "unschedulable in words",
        lambda: "Insufficient nvidia.com/gpu" in (tau.json("status", run_id).get("progress") or ""),
    )
    text = tau("status", run_id, check=True).stdout
    assert "Now:        scheduling: pod" in text and "hint:" in text


def test_the_server_killed_mid_run_picks_up_where_the_cluster_is(
    tau: Tau, cluster: KueuePlayer
) -> None:
    run_id = submit(tau, "survivor")
    job, pod = admitted_and_running(tau, cluster, run_id)
    tau.kill_server()
    # While no server watches: the pod ends and the Job completes.
    cluster.pod_exited(pod, 0)
    cluster.finish_job(job)
    # A cluster's home is not served by a local server by mistake (the CLI's auto-start).
    refused = tau("server", "start")
    assert refused.returncode != 0 and "--executor kubernetes" in refused.stderr, refused
    tau.start_server(*cluster.server_args)
    tau.wait_state(run_id, {"SUCCEEDED"})
    names = [j["metadata"]["name"] for j in cluster.jobs()]
    assert f"{run_id}-a1" not in names  # nothing started twice


def test_run_dry_run_prints_the_objects_and_creates_nothing(tau: Tau, cluster: KueuePlayer) -> None:
    import yaml

    (tau.cwd / "tau.yaml").write_text(SPEC.format(name="dry"))
    (tau.cwd / "train.py").write_text("print('hello')\n")
    proc = tau("run", "--dry-run", check=True)
    docs = list(yaml.safe_load_all(proc.stdout))
    assert [d["kind"] for d in docs] == ["Secret", "Job"]
    job = docs[-1]
    assert job["spec"]["suspend"] is True
    container = job["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["TAU_CHECKPOINT_DIR"] == "/tau/run/checkpoints"
    assert docs[0]["stringData"]["token"] == "(issued at launch)"
    assert cluster.jobs() == []
    assert tau.json("status")["runs"] == []


def test_a_local_server_says_a_dry_run_is_a_cluster_servers(tau: Tau) -> None:
    proc = tau("run", "--dry-run", "--", "echo", "hi")
    assert proc.returncode != 0
    assert "tau render" in proc.stderr and "Traceback" not in proc.stderr


def test_watches_cut_and_too_old_are_resumed_without_losing_a_change(
    tau: Tau, cluster: KueuePlayer
) -> None:
    run_id = submit(tau, "watched")
    job = cluster.wait_job(run_id)
    cluster.make_workload(job)
    cluster.emu.wait_watchers("v1", "Pod")
    assert cluster.emu.cut_watches() > 0  # mid-stream: the informers watch again
    cluster.admit(job)
    tau.wait_state(run_id, {"ADMITTED"})
    (pod,) = cluster.make_pods(cluster.wait_job(run_id))
    cluster.emu.wait_watchers("v1", "Pod")
    cluster.emu.expire_watches()  # 410 Gone: list again, and find what changed
    cluster.pod_running(pod)
    tau.wait_state(run_id, {"RUNNING"})
    cluster.pod_exited(pod, 0)
    cluster.finish_job(cluster.wait_job(run_id))
    tau.wait_state(run_id, {"SUCCEEDED"})


def test_throttled_and_failing_creates_are_retried_or_fail_the_run_in_words(
    tau: Tau, cluster: KueuePlayer
) -> None:
    # 429 with Retry-After and a 503: nothing was created, so the create is retried.
    cluster.emu.fail_next("create jobs", 429, retry_after=0.2)
    cluster.emu.fail_next("create jobs", 503)
    ok = submit(tau, "retried")
    cluster.wait_job(ok)
    assert state(tau, ok) == "QUEUED"
    # 403 is not retried: the run fails with the API server's words, and the Secret
    # made before the Job is deleted (never a half-created attempt).
    cluster.emu.fail_next(
        "create jobs", 403, reason="Forbidden", message='jobs.batch is forbidden: User "tau"'
    )
    refused = submit(tau, "refused")
    run = tau.wait_state(refused, {"FAILED"})
    assert "forbidden" in run["message"], run["message"]
    wait_for(
        "no Secret left of the refused attempt",
        lambda: cluster.emu.get("v1", "Secret", "default", f"{refused}-a0-code") is None,
    )


def test_a_name_taken_by_someone_elses_job_is_refused_not_adopted(
    tau: Tau, cluster: KueuePlayer
) -> None:
    (tau.cwd / "tau.yaml").write_text(SPEC.format(name="taken"))
    (tau.cwd / "train.py").write_text("print('hello')\n")
    # 409 on create: TauGrid reads the object, sees it is not this attempt's and stops.
    cluster.emu.fail_next("create jobs", 409, reason="AlreadyExists", message="exists")
    run_id = str(tau.json("run")["run"]["id"])
    run = tau.wait_state(run_id, {"FAILED", "QUEUED"})
    # The emulator answered 409 but holds no such Job: not ours, so not adopted.
    run = tau.wait_state(run_id, {"FAILED"})
    assert "could not submit" in run["message"], run["message"]


def test_a_lost_node_is_not_a_failure_the_job_makes_a_new_pod(
    tau: Tau, cluster: KueuePlayer
) -> None:
    run_id = submit(tau, "nodelost")
    job, pod = admitted_and_running(tau, cluster, run_id)
    # The node goes: the pod gets DisruptionTarget, fails and is deleted; the Job's
    # podFailurePolicy ignores it and the Job controller makes a new pod.
    cluster.emu.put(
        {
            **pod,
            "status": {
                "phase": "Failed",
                "reason": "NodeLost",
                "conditions": [{"type": "DisruptionTarget", "status": "True"}],
            },
        }
    )
    cluster.emu.delete("v1", "Pod", "default", pod["metadata"]["name"])
    wait_for(
        "the run waiting for a new pod",
        lambda: "Job controller" in (tau.json("status", run_id).get("progress") or ""),
    )
    assert state(tau, run_id) == "RUNNING"
    (again,) = cluster.make_pods(job)
    cluster.pod_running(again)
    cluster.pod_exited(again, 0)
    cluster.finish_job(job)
    tau.wait_state(run_id, {"SUCCEEDED"})


MULTI = """\
name: {name}
image: python:3.12-slim
nodes: 2
launcher: torchrun
command: python train.py
resources: {{cpus: 1, memory: 1Gi}}
"""


def test_logs_of_every_rank_are_streamed_and_outlive_the_pods(
    tau: Tau, cluster: KueuePlayer
) -> None:
    run_id = submit(tau, "ranks", MULTI)
    job = cluster.wait_job(run_id)
    assert job["spec"]["completionMode"] == "Indexed" and job["spec"]["parallelism"] == 2
    service = cluster.emu.get("v1", "Service", "default", f"{run_id}-a0")
    assert service is not None and service["spec"]["clusterIP"] == "None"
    cluster.make_workload(job)
    cluster.admit(job)
    pods = cluster.make_pods(cluster.wait_job(run_id))
    assert len(pods) == 2
    for pod in pods:
        cluster.pod_running(pod)
    tau.wait_state(run_id, {"RUNNING"})
    for i, pod in enumerate(pods):
        cluster.emu.append_log("default", pod["metadata"]["name"], "workload", f"hello from {i}\n")
    wait_for(
        "both ranks' lines",
        lambda: (
            {"[rank 0] hello from 0", "[rank 1] hello from 1"}
            <= set(tau("logs", run_id).stdout.splitlines())
        ),
    )
    assert tau("logs", run_id, "--rank", "1").stdout == "hello from 1\n"
    follower = subprocess.Popen(
        [*TAU, "logs", "-f", run_id], env=tau.env(), cwd=tau.cwd, stdout=subprocess.PIPE, text=True
    )
    for i, pod in enumerate(pods):
        cluster.emu.append_log("default", pod["metadata"]["name"], "workload", f"bye from {i}\n")
        cluster.emu.end_log("default", pod["metadata"]["name"], "workload")
        cluster.pod_exited(pod, 0)
    cluster.finish_job(cluster.wait_job(run_id))
    tau.wait_state(run_id, {"SUCCEEDED"})
    out, _ = follower.communicate(timeout=60)
    assert follower.returncode == 0
    lines = out.splitlines()
    assert sorted(lines) == sorted(
        [
            "[rank 0] hello from 0",
            "[rank 1] hello from 1",
            "[rank 0] bye from 0",
            "[rank 1] bye from 1",
        ]
    ), out
    # The pods and their kubelet logs go; the archive stays.
    wait_for("the Job deleted", lambda: cluster.job(f"{run_id}-a0") is None)
    cluster.collect_garbage()
    for pod in pods:
        cluster.emu.drop_log("default", pod["metadata"]["name"], "workload")
    assert len(tau("logs", run_id).stdout.splitlines()) == 4


RAY = """\
name: {name}
image: rayproject/ray:2.60.0
launcher: ray
command: python train.py
resources: {{cpus: 1, memory: 2Gi}}
"""


def test_a_ray_run_is_a_rayjob_whose_status_is_the_runs(tau: Tau, cluster: KueuePlayer) -> None:
    run_id = submit(tau, "ray", RAY)
    name = f"{run_id}-a0"
    job = wait_for("the RayJob", lambda: cluster.emu.get("ray.io/v1", "RayJob", "default", name))
    assert job["spec"]["shutdownAfterJobFinishes"] is True
    assert job["spec"]["entrypoint"].endswith("python train.py")
    # Kueue admits it and unsuspends; KubeRay brings the cluster up and runs the job.
    cluster.emu.put(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {
                "name": f"rayjob-{name}-1a2b3",
                "namespace": "default",
                "ownerReferences": [{"kind": "RayJob", "name": name, "uid": "u1"}],
            },
            "status": {
                "conditions": [
                    {"type": "QuotaReserved", "status": "True"},
                    {"type": "Admitted", "status": "True"},
                ],
                "admission": {"clusterQueue": "cq", "podSetAssignments": []},
            },
        }
    )
    tau.wait_state(run_id, {"ADMITTED"})
    cluster.emu.patch("ray.io/v1", "RayJob", "default", name, {"spec": {"suspend": False}})
    cluster.emu.patch_status(
        "ray.io/v1",
        "RayJob",
        "default",
        name,
        {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING", "rayClusterName": "rc-1"},
    )
    tau.wait_state(run_id, {"RUNNING"})
    cluster.emu.patch_status(
        "ray.io/v1",
        "RayJob",
        "default",
        name,
        {
            "jobDeploymentStatus": "Failed",
            "jobStatus": "FAILED",
            "reason": "AppFailed",
            "message": "Job entrypoint command failed with exit code 3",
        },
    )
    run = tau.wait_state(run_id, {"FAILED"})
    assert "exit code 3" in run["message"], run["message"]


def test_secrets_reach_pods_by_reference_and_never_their_logs(
    tau: Tau, cluster: KueuePlayer
) -> None:
    tau("secret", "set", "hf-token", input_text="hf_s3cr3t_v4lue\n", check=True)
    secret = wait_for(
        "the Secret", lambda: cluster.emu.get("v1", "Secret", "default", "taugrid-s-hf-token")
    )
    assert "hf_s3cr3t_v4lue" not in str(tau.json("secret", "list"))
    spec = SPEC + "secrets:\n  HF_TOKEN: hf-token\n"
    run_id = submit(tau, "secretive", spec)
    job = cluster.wait_job(run_id)
    env = job["spec"]["template"]["spec"]["containers"][0]["env"]
    ref = next(e for e in env if e["name"] == "HF_TOKEN")["valueFrom"]["secretKeyRef"]
    assert ref == {"name": secret["metadata"]["name"], "key": "value"}
    assert "hf_s3cr3t_v4lue" not in str(job)
    job, pod = admitted_and_running(tau, cluster, run_id)
    cluster.emu.append_log(
        "default", pod["metadata"]["name"], "workload", "token is hf_s3cr3t_v4lue\n"
    )
    wait_for("the masked line", lambda: "token is ***" in tau("logs", run_id).stdout)
    assert "hf_s3cr3t_v4lue" not in tau("logs", run_id).stdout


def test_queue_positions_come_from_kueues_visibility_api(tau: Tau, cluster: KueuePlayer) -> None:
    first, second = submit(tau, "first"), submit(tau, "second")
    jobs = [cluster.wait_job(first), cluster.wait_job(second)]
    for job in jobs:
        cluster.make_workload(job)
    queue = jobs[0]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]
    # Kueue says the second is ahead of the first (a higher priority, say), and 3 more
    # workloads of other teams are ahead of both in the cluster queue.
    cluster.emu.set_pending(
        "default",
        queue,
        [
            {
                "metadata": {
                    "name": f"job-{job['metadata']['name']}-1a2b3",
                    "namespace": "default",
                    "ownerReferences": [{"kind": "Job", "name": job["metadata"]["name"]}],
                },
                "priority": 0,
                "localQueueName": queue,
                "positionInClusterQueue": 3 + i,
                "positionInLocalQueue": i,
            }
            for i, job in enumerate(reversed(jobs))
        ],
    )

    def pending(run_id: str) -> dict[str, Any]:
        return tau.json("status", run_id).get("pending") or {}

    wait_for("Kueue's position", lambda: pending(first).get("position") == 5)
    assert pending(second)["position"] == 4
    assert "#2 in local queue" in pending(first)["message"]
    assert "insufficient unused quota" in pending(first)["message"]
    text = tau("status", first, check=True).stdout
    assert "#5 in cluster queue" in text, text


def test_what_the_cluster_cannot_run_is_refused_at_submit_with_nothing_created(
    tau: Tau, cluster: KueuePlayer
) -> None:
    (tau.cwd / "train.py").write_text("print('hello')\n")
    (tau.cwd / "tau.yaml").write_text(SPEC.format(name="tpu"))
    proc = tau("run", "--set", "resources.gpus=1", "--set", "resources.gpu_type=tpu")
    assert proc.returncode == 2, proc
    assert "gpu_type" in proc.stderr and "tpu" in proc.stderr and "Traceback" not in proc.stderr
    long_ray = RAY.format(name="a-ray-run-whose-name-is-far-too-long-for-kuberay")
    (tau.cwd / "tau.yaml").write_text(long_ray)
    proc = tau("run")
    assert proc.returncode == 2 and "RayJob" in proc.stderr, proc
    assert cluster.jobs() == [] and cluster.emu.objects("ray.io/v1", "RayJob") == []
    assert tau.json("status")["runs"] == []
