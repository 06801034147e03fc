import signal

import pytest

from taugrid.domain.outcomes import AttemptExit, classify_exit
from taugrid.domain.runid import new_run_id
from taugrid.domain.states import Reason, RunState
from taugrid.domain.workload_env import WorkloadContext, submitter_env, workload_env


@pytest.mark.parametrize(
    ("ex", "state", "reason"),
    [
        (AttemptExit("succeeded", 0), RunState.SUCCEEDED, Reason.COMPLETED),
        (AttemptExit("failed", 3), RunState.FAILED, Reason.EXIT_CODE),
        (AttemptExit("failed", 137, signal.SIGKILL), RunState.FAILED, Reason.EXIT_CODE),
        (AttemptExit("failed", 137, signal.SIGKILL, oom=True), RunState.FAILED, Reason.OOM_KILLED),
        (AttemptExit("failed", 127, error="not found"), RunState.FAILED, Reason.START_FAILED),
        (AttemptExit("cancelled", 143, signal.SIGTERM), RunState.CANCELLED, Reason.CANCELLED),
        (AttemptExit("timeout", 143), RunState.FAILED, Reason.TIMEOUT),
        (AttemptExit("lost", None, error="gone"), RunState.FAILED, Reason.LOST),
    ],
)
def test_classify_exit(ex: AttemptExit, state: RunState, reason: Reason) -> None:
    v = classify_exit(ex)
    assert (v.state, v.reason) == (state, reason)


def test_exit_code_message_names_code() -> None:
    assert "code 3" in classify_exit(AttemptExit("failed", 3)).message


def test_run_id_shape() -> None:
    ids = {new_run_id("mnist") for _ in range(50)}
    assert len(ids) == 50
    assert all(i.startswith("mnist-") and len(i) == 11 for i in ids)
    with pytest.raises(ValueError):
        new_run_id("x" * 60)


def test_submitter_env_is_an_allow_list() -> None:
    env = submitter_env(
        {
            "PATH": "/bin",
            "VIRTUAL_ENV": "/v",
            "CONDA_PREFIX": "/c",
            "LC_ALL": "C",
            "AWS_SECRET_ACCESS_KEY": "s",
            "HF_TOKEN": "t",
        }
    )
    assert env == {"PATH": "/bin", "VIRTUAL_ENV": "/v", "CONDA_PREFIX": "/c", "LC_ALL": "C"}


def test_workload_env_tau_vars_win_over_spec() -> None:
    ctx = WorkloadContext("r-abcde", "r", "ws", 0, "/ck", "/out", "/m", [2, 3])
    env = workload_env({"PATH": "/bin"}, {"TAU_RUN_ID": "spoof", "LR": "1"}, ctx)
    assert env["TAU_RUN_ID"] == "r-abcde"
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert env["LR"] == "1" and env["PATH"] == "/bin"
    assert "TAU_RESUME_FROM" not in env
