"""Records through the real CLI and server: what `tau run` records about code and Python,
`tau rerun`, `tau diff`, `tau resume`, `tau metrics`, checkpoint download, `tau list
--experiment`."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tauproc import Tau, write_spec

PY = sys.executable
# The workload's python3 is this interpreter (it can import taugrid for the SDK).
VENV_PATH = f"{Path(PY).parent}{os.pathsep}{os.environ.get('PATH', '')}"

JOB = "import os\nprint('lr', os.environ['LR'], open('version.txt').read().strip(), flush=True)\n"


def git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
        "GIT_CONFIG_GLOBAL": os.devnull,
    }
    out = subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)
    return out.stdout.decode().strip()


def project(tau: Tau) -> Path:
    proj = tau.cwd / "proj"
    proj.mkdir()
    (proj / "job.py").write_text(JOB)
    (proj / "version.txt").write_text("v1\n")
    write_spec(proj, f"name: lrjob\ncommand: [{PY}, job.py]\nenv: {{LR: '0.1'}}\n")
    return proj


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_run_records_code_and_python_but_no_secrets(tau: Tau) -> None:
    proj = project(tau)
    git(proj, "init", "-q", "-b", "main")
    git(proj, "add", ".")
    git(proj, "commit", "-qm", "first")
    (proj / "version.txt").write_text("v1-dirty\n")
    (proj / "notes.md").write_text("untracked\n")
    tau("run", "--wait", cwd=proj, PATH=VENV_PATH, MY_API_TOKEN="s3cret-value", check=True)
    detail = tau.json("status", "lrjob")
    git_rec = detail["code"]["git"]
    assert git_rec["commit"] == git(proj, "rev-parse", "HEAD")
    assert git_rec["branch"] == "main" and git_rec["dirty"] is True
    assert git_rec["untracked"] == ["notes.md"] and "+v1-dirty" in git_rec["diff"]
    assert detail["code"]["snapshot_digest"] == detail["spec"]["snapshot_digest"]
    py = detail["python_env"]
    assert py["version"] == ".".join(map(str, sys.version_info[:3]))
    assert "taugrid" in py["packages"]
    assert "s3cret-value" not in json.dumps(detail)
    text = tau("status", "lrjob", check=True).stdout
    assert f"Code:       git {git_rec['commit'][:12]} (main), dirty" in text


def test_rerun_uses_the_recorded_snapshot_with_more_overrides(tau: Tau) -> None:
    proj = project(tau)
    tau("run", "--wait", "--set", "resources.gpus=0", cwd=proj, check=True)
    first = tau.json("status", "lrjob")
    (proj / "version.txt").write_text("v2\n")  # the rerun must not see this
    final = tau.json("rerun", first["id"], "--set", "env.LR=0.2", "--wait", cwd=tau.cwd)
    assert final["id"] != first["id"] and final["state"] == "SUCCEEDED"
    assert final["spec"]["snapshot_digest"] == first["spec"]["snapshot_digest"]
    assert final["spec"]["overrides"] == ["resources.gpus=0", "env.LR=0.2"]
    assert final["spec"]["resolved"]["env"] == {"LR": "0.2"}
    assert final["spec"]["file_text"] == first["spec"]["file_text"]
    assert final["spec"]["hash"] != first["spec"]["hash"]
    assert final["code"]["git"] == first["code"]["git"]
    assert final["python_env"] == first["python_env"]
    assert tau("logs", final["id"], check=True).stdout == "lr 0.2 v1\n"

    # no new override: the same spec hash; a bad one: exit 2 and nothing created
    same = tau.json("rerun", first["id"])["run"]
    assert tau.json("status", same["id"])["spec"]["hash"] == first["spec"]["hash"]
    count = len(tau.json("list")["runs"])
    bad = tau("rerun", first["id"], "--set", "resources.gpus=lots")
    assert bad.returncode == 2 and "--set resources.gpus=lots: resources.gpus:" in bad.stderr
    assert len(tau.json("list")["runs"]) == count


def test_diff_of_two_runs_differing_by_one_set(tau: Tau) -> None:
    proj = project(tau)
    a = tau.json("run", "--set", "env.LR=0.1", cwd=proj)["run"]["id"]
    b = tau.json("run", "--set", "env.LR=0.3", cwd=proj)["run"]["id"]
    data = tau.json("diff", a, b)
    assert data["a"] == a and data["b"] == b and data["identical"] is False
    assert data["spec"] == [{"key": "env.LR", "change": "changed", "a": "0.1", "b": "0.3"}]
    assert data["code"]["snapshot"]["same"] is True
    assert data["overrides"]["only_a"] == ["env.LR=0.1"]
    assert data["overrides"]["only_b"] == ["env.LR=0.3"]
    assert data["environment"]["packages"] == []
    text = tau("diff", a, b, check=True).stdout
    assert '  ~ env.LR: "0.1" -> "0.3"' in text
    assert tau("diff", a, a, check=True).stdout == "no differences\n"


def test_resume_a_failed_run(tau: Tau) -> None:
    # Fails on its first attempt only.
    script = "import os, sys; sys.exit(os.environ['TAU_ATTEMPT'] == '0')"
    proc = tau("run", "--wait", "--name", "flaky", "--", PY, "-c", script)
    assert proc.returncode == 1
    failed = tau.json("status", "flaky")
    assert failed["state"] == "FAILED" and failed["attempts"] == 1
    att = failed["attempt_list"][0]
    assert (att["reason"], att["failure_class"]) == ("ExitCode", "exit_code")

    resumed = tau.json("resume", "flaky")
    assert resumed["id"] == failed["id"] and resumed["state"] == "QUEUED"
    done = tau.wait_state("flaky", {"SUCCEEDED", "FAILED"})
    assert done["state"] == "SUCCEEDED" and done["attempts"] == 2
    assert [a["attempt"] for a in done["attempt_list"]] == [0, 1]
    assert done["attempt_list"][1]["reason"] == "Completed"
    assert done["attempt_list"][1]["failure_class"] is None

    # a run that has not finished cannot be resumed: Conflict, exit 7
    tau("run", "--name", "busy", "--", "sleep", "30", check=True)
    tau.wait_state("busy", {"RUNNING"})
    assert tau("resume", "busy").returncode == 7
    tau("cancel", "busy", check=True)

    # --wait: the run's own exit code, and the attempt number printed
    proc = tau("resume", "flaky", "--wait")
    assert proc.returncode == 0 and "resumed as attempt 2" in proc.stderr


SDK_JOB = """\
import os, sys, taugrid
attempt = int(os.environ["TAU_ATTEMPT"])
start = 0
if os.environ.get("TAU_RESUME_FROM"):
    path = os.environ["TAU_RESUME_FROM"]
    start = int(open(os.path.join(path, "state.txt")).read())
    print("resumed from", start, flush=True)
for step in range(start + 1, start + 4):
    taugrid.log(step=step, loss=1.0 / step, acc=step / 10)
with taugrid.checkpoint.saving(start + 3) as d:
    open(os.path.join(d, "state.txt"), "w").write(str(start + 3))
    os.makedirs(os.path.join(d, "sub"))
    open(os.path.join(d, "sub", "weights.bin"), "wb").write(bytes(range(256)) * 40)
sys.exit(1 if attempt == 0 else 0)
"""


def test_metrics_checkpoints_download_and_resume_from_checkpoint(tau: Tau, tmp_path: Path) -> None:
    argv = ["--name", "sdk", "--set", "experiment.name=exp1", "--", PY, "-c", SDK_JOB]
    assert tau("run", "--wait", *argv).returncode == 1

    series = tau.json("metrics", "sdk")["series"]
    assert [(p["attempt"], p["step"]) for p in series] == [(0, 1), (0, 2), (0, 3)]
    assert series[2]["values"] == {"loss": pytest.approx(1 / 3), "acc": pytest.approx(0.3)}
    rows = list(csv.reader(io.StringIO(tau("metrics", "sdk", "--csv", check=True).stdout)))
    assert rows[0] == ["step", "time", "attempt", "loss", "acc"] and len(rows) == 4
    keyed = tau("metrics", "sdk", "--csv", "--key", "acc", check=True).stdout.splitlines()
    assert keyed[0] == "step,time,attempt,acc" and keyed[1].endswith(",0,0.1")

    detail = tau.json("status", "sdk")
    assert detail["metrics_last"]["step"] == 3
    assert [c["step"] for c in detail["checkpoints"]] == [3]
    assert detail["checkpoints"][0]["verified"] is True
    text = tau("status", "sdk", check=True).stdout
    assert "Checkpoints:" in text and "✓" in text and "Metrics:    step 3:" in text

    out = tmp_path / "got"
    got = tau.json("get", "sdk", "--checkpoint", "-d", str(out))
    step_dir = out / "step-0000000003"
    assert got["step"] == 3 and got["dir"] == str(step_dir.resolve())
    assert (step_dir / "state.txt").read_text() == "3"
    weights = (step_dir / "sub" / "weights.bin").read_bytes()
    assert weights == bytes(range(256)) * 40
    manifest = json.loads((step_dir / "tau-checkpoint.json").read_text())
    assert manifest["step"] == 3
    by_path = {f["path"]: f for f in manifest["files"]}
    assert by_path["sub/weights.bin"]["sha256"] == hashlib.sha256(weights).hexdigest()
    assert tau("get", "sdk", "--checkpoint", "99", "-d", str(out)).returncode == 5

    listed = tau("list", "--experiment", "exp1", check=True).stdout.splitlines()
    assert listed[0].split()[-4:] == ["GROUP", "TAGS", "ACC", "LOSS"]
    assert len(listed) == 2 and listed[1].split()[-2:] == ["0.3", "0.333333"]
    assert tau.json("list", "--experiment", "nope")["runs"] == []

    proc = tau("resume", "sdk", "--wait")
    assert proc.returncode == 0, proc.stderr
    assert "attempt 1 resumed from checkpoint step 3" in proc.stderr
    done = tau.json("status", "sdk")
    assert done["attempt_list"][1]["resumed_from"]["step"] == 3
    assert "resumed from 3" in tau("logs", "sdk", check=True).stdout
    steps = [p["step"] for p in tau.json("metrics", "sdk", "--attempt", "1")["series"]]
    assert steps == [4, 5, 6]


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_downloads_never_enter_a_later_snapshot_or_make_git_dirty(tau: Tau) -> None:
    proj = project(tau)
    (proj / "job.py").write_text(
        JOB
        + "import os\nopen(os.environ['TAU_OUTPUT_DIR'] + '/model.bin', 'wb').write(b'w' * 4096)\n"
    )
    git(proj, "init", "-q", "-b", "main")
    git(proj, "add", ".")
    git(proj, "commit", "-qm", "first")
    tau("run", "--wait", cwd=proj, PATH=VENV_PATH, check=True)
    first = tau.json("status", "lrjob")
    got = tau.json("get", first["id"], cwd=proj)  # the default place: ./<run id>/ in the repo
    assert Path(got["dir"]) == proj / first["id"]
    assert (proj / first["id"] / "model.bin").stat().st_size == 4096
    assert git(proj, "status", "--porcelain") == ""  # git does not see the download
    tau("run", "--wait", cwd=proj, PATH=VENV_PATH, check=True)
    second = tau.json("status", "lrjob")
    assert second["id"] != first["id"]
    assert second["code"]["git"]["dirty"] is False
    # Same code, so the same content-addressed snapshot: the download is not in it.
    assert second["spec"]["snapshot_digest"] == first["spec"]["snapshot_digest"]
    # A directory the user already had is not marked.
    mine = proj / "mine"
    mine.mkdir()
    tau("get", first["id"], "-d", str(mine), cwd=proj, check=True)
    assert not (mine / ".gitignore").exists() and (mine / "model.bin").exists()
