"""`tau list --experiment/--metric` columns and the new sections of `tau status RUN`."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from clifakes import FakeClient, invoke

from taugrid.cli.commands.listing import auto_metrics, experiment_columns
from taugrid.cli.commands.status import (
    attempts_table,
    checkpoints_table,
    describe,
    human_bytes,
    runs_table,
)

NOW = time.time()


def run_out(run_id: str, **more: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": run_id,
        "name": run_id.rsplit("-", 1)[0],
        "workspace": "default",
        "queue": "default",
        "priority": None,
        "state": "SUCCEEDED",
        "reason": "Completed",
        "message": "exited with code 0",
        "created_at": NOW - 60,
        "updated_at": NOW - 5,
        "started_at": NOW - 50,
        "finished_at": NOW - 5,
        "exit_code": 0,
        "attempts": 1,
        "gpus": 0,
        "submitter": "alice",
        "spec_hash": "f" * 64,
        "cancel_requested": False,
        "experiment": None,
        "metrics_last": None,
        "restarts": 0,
    }
    base.update(more)
    return base


def metrics(**values: float | None) -> dict[str, Any]:
    return {"step": 100, "time": NOW - 6, "values": values}


RUNS = [
    run_out(
        "sweep-aaaaa",
        experiment={"name": "sweep", "group": "lr", "tags": {"lr": "0.1", "seed": "1"}},
        metrics_last=metrics(loss=0.25, acc=0.9, lr=0.1),
    ),
    run_out(
        "sweep-bbbbb",
        experiment={"name": "sweep", "group": None, "tags": {}},
        metrics_last=metrics(loss=None, acc=0.8123456789),
    ),
    run_out("sweep-ccccc", experiment={"name": "sweep", "group": "lr", "tags": {}}),
]


def test_auto_metrics_most_common_first_then_by_name() -> None:
    assert auto_metrics(RUNS) == ["acc", "loss", "lr"]
    assert auto_metrics(RUNS, limit=2) == ["acc", "loss"]
    many = [run_out("m-aaaaa", metrics_last=metrics(**{f"k{i}": 1.0 for i in range(10)}))]
    assert len(auto_metrics(many)) == 6


def test_experiment_columns() -> None:
    lines = runs_table(RUNS, experiment_columns(["loss", "acc"])).splitlines()
    assert lines[0].split() == [
        *["RUN", "STATE", "SUBMITTED", "DURATION", "EXIT", "REASON"],
        *["GROUP", "TAGS", "LOSS", "ACC"],
    ]
    first, second, third = (line.split() for line in lines[1:])
    assert first[-4:] == ["lr", "lr=0.1,seed=1", "0.25", "0.9"]
    assert second[-4:] == ["-", "-", "-", "0.812346"]  # null value: "-"
    assert third[-2:] == ["lr", "-"]  # no metrics at all: blank cells


def test_list_command_passes_the_filter_and_shows_the_columns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeClient({r["id"]: r for r in RUNS})
    result = invoke(monkeypatch, "listing", fake, "list", "--experiment", "sweep")
    assert result.exit_code == 0, result.output
    assert fake.list_params[-1]["experiment"] == "sweep"
    assert result.stdout.splitlines()[0].split()[-5:] == ["GROUP", "TAGS", "ACC", "LOSS", "LR"]
    result = invoke(monkeypatch, "listing", fake, "list", "--metric", "loss")
    assert result.stdout.splitlines()[0].split()[-3:] == ["GROUP", "TAGS", "LOSS"]
    assert fake.list_params[-1]["experiment"] is None
    result = invoke(monkeypatch, "listing", fake, "list")
    assert result.stdout.splitlines()[0].split()[-1] == "REASON"


def test_list_passes_queue_user_and_search_as_the_api_names_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeClient({r["id"]: r for r in RUNS})
    args = ["list", "--queue", "big", "--user", "bob", "--search", "lr_0.1%"]
    result = invoke(monkeypatch, "listing", fake, *args)
    assert result.exit_code == 0, result.output
    assert {k: fake.list_params[-1][k] for k in ("queue", "user", "q")} == {
        "queue": "big",
        "user": "bob",
        "q": "lr_0.1%",
    }
    invoke(monkeypatch, "listing", fake, "list")
    assert [fake.list_params[-1][k] for k in ("queue", "user", "q")] == [None, None, None]


def detail(**more: Any) -> dict[str, Any]:
    d = run_out("train-x7k2p", state="FAILED", reason="ExitCode", exit_code=1)
    d.update(
        spec={
            "source": "tau.yaml",
            "file_text": "…",
            "overrides": ["env.LR=0.1"],
            "resolved": {"command": "python train.py"},
            "hash": "a" * 64,
            "snapshot_digest": "b" * 64,
        },
        env={},
        events=[],
        attempt_list=[
            {
                "attempt": 0,
                "created_at": NOW - 60,
                "started_at": NOW - 60,
                "finished_at": NOW - 30,
                "exit_code": None,
                "signal": 9,
                "outcome": "failed",
                "placement": {"host": "local", "gpus": [0]},
                "reason": "OOMKilled",
                "failure_class": "oom",
                "message": "killed by the kernel for memory",
                "resumed_from": None,
            },
            {
                "attempt": 1,
                "created_at": NOW - 29,
                "started_at": NOW - 29,
                "finished_at": NOW - 5,
                "exit_code": 1,
                "signal": None,
                "outcome": "failed",
                "placement": {"host": "local", "gpus": [1]},
                "reason": "ExitCode",
                "failure_class": "exit_code",
                "message": "exited with code 1",
                "resumed_from": {"step": 200, "path": "/ck/step-0000000200"},
            },
        ],
        checkpoints=[
            {
                "step": 300,
                "name": "step-0000000300",
                "created_at": NOW - 10,
                "attempt": 1,
                "size": 3 * 2**20,
                "file_count": 2,
                "verified": False,
                "problem": "model.pt: size differs",
            },
            {
                "step": 200,
                "name": "step-0000000200",
                "created_at": NOW - 40,
                "attempt": 0,
                "size": 512,
                "file_count": 1,
                "verified": True,
                "problem": None,
            },
        ],
        restart_policy={
            "max": 3,
            "on": ["error", "preemption"],
            "backoff_s": 30.0,
            "used": 1,
            "next_at": time.time() + 12.4,
        },
        metrics_last=metrics(loss=0.5, acc=None),
        experiment={"name": "sweep", "group": "lr", "tags": {"lr": "0.1"}},
        code={
            "snapshot_digest": "b" * 64,
            "git": {
                "commit": "c" * 40,
                "branch": "main",
                "dirty": True,
                "diff": "a\nb\n",
                "diff_truncated": False,
                "untracked": ["x.py"],
            },
        },
        python_env={
            "version": "3.11.7",
            "implementation": "CPython",
            "executable": "/usr/bin/python3",
            "packages": {"numpy": "2.0.0"},
        },
    )
    d.update(more)
    return d


def test_status_sections() -> None:
    text = describe(detail())
    lines = text.splitlines()
    assert "Experiment: sweep   Group: lr   Tags: lr=0.1" in lines
    restart = next(line for line in lines if line.startswith("Restarts:"))
    assert restart.startswith("Restarts:   1/3 used (on error, preemption, backoff 30s)")
    assert re.search(r"; next restart in 1[0-2]s$", restart)
    assert any(line.startswith("Metrics:    step 100: loss=0.5  acc=-  (") for line in lines)
    assert "Code:       git cccccccccccc (main), dirty: 2-line diff, 1 untracked" in lines
    assert "Python:     CPython 3.11.7  /usr/bin/python3  (1 packages)" in lines
    attempts = text.split("\nAttempts:\n")[1].split("\n\n")[0].splitlines()
    assert attempts[0].split() == [
        *["#", "STARTED", "DURATION", "OUTCOME", "REASON", "EXIT", "RESUMED", "FROM", "GPUS"]
    ]
    assert attempts[1].split()[3:] == ["30s", "failed", "OOMKilled", "SIGKILL", "-", "0"]
    assert attempts[2].split()[3:] == ["24s", "failed", "ExitCode", "1", "step", "200", "1"]
    assert "  attempt 0: killed by the kernel for memory" in attempts
    checkpoints = text.split("\nCheckpoints:\n")[1].splitlines()
    assert checkpoints[0].split() == ["STEP", "TIME", "ATTEMPT", "SIZE", "FILES", "VERIFIED"]
    assert checkpoints[1].split()[3:] == [
        "1",
        "3.0",
        "MiB",
        "2",
        "✗",
        "model.pt:",
        "size",
        "differs",
    ]
    assert checkpoints[2].split()[3:] == ["0", "512", "B", "1", "✓"]


def test_status_of_a_record_from_an_older_server_keeps_the_old_output() -> None:
    d = detail()
    for key in ("checkpoints", "restart_policy", "metrics_last", "experiment", "code"):
        del d[key]
    del d["python_env"]
    for a in d["attempt_list"]:
        for key in ("reason", "failure_class", "message", "resumed_from"):
            del a[key]
    text = describe(d)
    assert "Checkpoints:" not in text and "Restarts:" not in text and "\nCode:" not in text
    assert "Attempts:" in text


def test_restart_line_only_with_a_policy_in_use() -> None:
    off = {"max": 0, "on": [], "backoff_s": 30.0, "used": 0, "next_at": None}
    assert "Restarts:" not in describe(detail(restart_policy=off))
    no_git = describe(detail(code={"snapshot_digest": "b" * 64, "git": None}))
    assert "Code:       no git repository recorded" in no_git


def test_small_tables_and_sizes() -> None:
    assert human_bytes(0) == "0 B" and human_bytes(1536) == "1.5 KiB"
    assert human_bytes(5 * 2**40) == "5.0 TiB"
    assert "signal 99" in attempts_table([{"attempt": 0, "started_at": None, "signal": 99}])
    assert "✓" in checkpoints_table([{"step": 1, "created_at": NOW, "verified": True}])


def test_states_in_colour_only_on_request_and_never_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    runs = [run_out("a-aaaaa"), run_out("b-bbbbb", state="FAILED", reason="ExitCode")]
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    plain = runs_table(runs)  # stdout is not a terminal here
    assert "\x1b[" not in plain
    monkeypatch.setenv("FORCE_COLOR", "1")
    coloured = runs_table(runs)
    assert "\x1b[32mSUCCEEDED\x1b[0m" in coloured and "\x1b[31mFAILED\x1b[0m" in coloured
    # Same text and alignment once the escapes are taken out: the word is always there.
    assert re.sub(r"\x1b\[[0-9;]*m", "", coloured) == plain
    monkeypatch.setenv("NO_COLOR", "1")  # wins over FORCE_COLOR
    assert runs_table(runs) == plain


def test_command_line_is_shell_quoted() -> None:
    d = detail()
    d["spec"]["resolved"]["command"] = ["python", "train.py", "--name", "my run", "a'b"]
    line = next(x for x in describe(d).splitlines() if x.startswith("Command:"))
    assert line == "Command:    python train.py --name 'my run' 'a'\"'\"'b'"


def test_status_says_when_it_shows_only_the_newest(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeClient()
    fake.runs = {f"r-{i:05d}": run_out(f"r-{i:05d}") for i in range(3)}
    result = invoke(monkeypatch, "status", fake, "status")
    assert "newest" not in result.stderr
    original = fake.list_runs
    monkeypatch.setattr(fake, "list_runs", lambda **kw: {**original(**kw), "next_cursor": "x"})
    result = invoke(monkeypatch, "status", fake, "status")
    assert "the newest 20 runs; see more with: tau list --limit 200" in result.stderr


def test_status_shows_a_running_runs_gpu_use_and_idleness() -> None:
    import time as _time

    from taugrid.cli.commands.status import gpu_use_lines

    assert gpu_use_lines({"gpu_use": None}) == []  # not read: nothing, never "0%"
    now = _time.time()
    use = {
        "at": now - 5,
        "utilization_pct": 97.0,
        "memory_used_bytes": 31 << 30,
        "memory_total_bytes": 160 << 30,
        "gpus": [
            {"index": 0, "utilization_pct": 97.0},
            {"index": 1, "utilization_pct": 3.0},
        ],
        "idle_since": None,
        "flagged_idle": False,
    }
    (line,) = gpu_use_lines({"gpu_use": use})
    assert line.startswith("GPU use:    97% (GPU 0: 97%, 1: 3%), memory 31.0 of 160 GiB")
    idle = {**use, "utilization_pct": 1.0, "idle_since": now - 1800, "flagged_idle": True}
    lines = gpu_use_lines({"gpu_use": idle})
    assert "idle for 30" in lines[1] and "flagged by the policy's gpu_idle" in lines[1]
