"""launch_request: the environment of an attempt the server could not choose a resume
point for (a cluster volume it does not see) after a hardware fault."""

from __future__ import annotations

from taugrid.ports.artifacts import WorkloadPaths
from taugrid.ports.executor import Placement
from taugrid.server.launching import launch_request


def test_the_server_sets_it_only_when_it_chose_nothing() -> None:
    run = {
        "id": "r-abcde",
        "name": "r",
        "workspace": "default",
        "spec_resolved": {"command": ["python", "t.py"]},
        "env_summary": {},
        "snapshot_digest": "0" * 64,
    }
    paths = WorkloadPaths("/tau/run/checkpoints", "/tau/run/outputs", "/tau/run/m.jsonl")
    blind = launch_request(run, 1, Placement("x"), paths, None, {}, None, resume_before=12.5)
    assert blind.env["TAU_RESUME_BEFORE"] == "12.500000"
    chose = launch_request(run, 1, Placement("x"), paths, "/c/step-1", {}, None, resume_before=1.0)
    assert "TAU_RESUME_BEFORE" not in chose.env
