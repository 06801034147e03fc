"""The node's GPU health agent (taugrid/healthagent.py) on a replay file and an injected
transport: what it sends, what it keeps when the server is away, its heartbeat, and one
line (never a traceback) for what it cannot read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from taugrid.health.podresources import PodResources
from taugrid.health.replay import ReplaySource
from taugrid.healthagent import Agent, ReportRefused, Sender, build, main, run

# A ListPodResourcesResponse: pod team-a/train-a0-0, container c, nvidia.com/gpu GPU-0.
_DEV = b"\x0a\x0envidia.com/gpu\x12\x05GPU-0"
_CONTAINER = b"\x0a\x01c\x12" + bytes([len(_DEV)]) + _DEV
_POD = b"\x0a\x0atrain-a0-0\x12\x06team-a\x1a" + bytes([len(_CONTAINER)]) + _CONTAINER
POD_ON_GPU0 = b"\x0a" + bytes([len(_POD)]) + _POD

LINES = [
    {"kind": "xid", "gpu_uuid": "GPU-0", "at": 1796000000.0, "xid": 79, "source": "kmsg"},
    {"kind": "remap_pending", "gpu_uuid": "GPU-1", "at": 1796000001.0},
]


class Transport:
    def __init__(self, fail: int = 0, status: int = 0) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.fail = fail
        self.status = status

    def __call__(
        self, url: str, data: bytes, headers: dict[str, str], timeout: float
    ) -> dict[str, Any]:
        assert url == "http://tau:8080/api/v1/health/reports"
        assert headers["Authorization"] == "Bearer agent-secret"
        if self.fail:
            self.fail -= 1
            raise OSError("connection refused")
        body = json.loads(data)
        self.bodies.append(body)
        return {"node": body["node"], "level": 3, "healthy": False, "reason": "Xid 79"}


def replay(tmp_path: Path, lines: list[dict[str, Any]] = LINES) -> Path:
    path = tmp_path / "drill.jsonl"
    path.write_text("# a drill\n" + "".join(json.dumps(x) + "\n" for x in lines))
    return path


def agent(tmp_path: Path, transport: Transport, clock: list[float]) -> Agent:
    sender = Sender("http://tau:8080/", "agent-secret", post=transport)
    source = ReplaySource(replay(tmp_path), node="gpu-1")
    return Agent(
        "gpu-1",
        [source],
        sender,
        gpus=[{"index": 0, "uuid": "GPU-0"}],
        interval_s=30,
        pods=PodResources(call=lambda timeout: POD_ON_GPU0),
        clock=lambda: clock[0],
    )


def test_a_report_carries_the_observations_the_gpus_and_the_node_once(tmp_path: Path) -> None:
    transport, clock = Transport(), [100.0]
    a = agent(tmp_path, transport, clock)
    assert a.read() == 2 and a.due()
    assert a.report()
    (body,) = transport.bodies
    assert body["node"] == "gpu-1" and body["gpus"] == [{"index": 0, "uuid": "GPU-0"}]
    assert body["observations"] == [
        {"kind": "xid", "gpu_uuid": "GPU-0", "at": 1796000000.0, "xid": 79, "source": "kmsg"},
        {"kind": "remap_pending", "gpu_uuid": "GPU-1", "at": 1796000001.0},
    ]
    assert body["gpu_pods"] == {"GPU-0": ["team-a/train-a0-0"]}  # the kubelet's map
    assert a.pending == [] and a.standing is not None and a.standing["level"] == 3
    # Nothing new: no report until the heartbeat is due, then an empty one.
    assert a.read() == 0 and not a.due()
    clock[0] += 30
    assert a.due() and a.report()
    assert transport.bodies[-1]["observations"] == []
    assert "gpu_pods" not in transport.bodies[-1]  # a heartbeat asks the kubelet nothing


def test_what_the_server_did_not_take_is_sent_again(tmp_path: Path) -> None:
    transport, clock = Transport(fail=2), [0.0]
    a = agent(tmp_path, transport, clock)
    a.read()
    assert not a.report() and not a.report()
    assert len(a.pending) == 2 and transport.bodies == []
    assert a.report()
    assert [o["kind"] for o in transport.bodies[0]["observations"]] == ["xid", "remap_pending"]


def test_once_prints_the_servers_answer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    transport, clock = Transport(), [0.0]
    assert run(agent(tmp_path, transport, clock), once=True) == 0
    assert json.loads(capsys.readouterr().out)["reason"] == "Xid 79"


def test_a_refused_report_is_not_retried_forever(tmp_path: Path) -> None:
    def refuse(url: str, data: bytes, headers: dict[str, str], timeout: float) -> dict[str, Any]:
        raise ReportRefused("the server refused the report (403): not an agent")

    a = Agent("gpu-1", [], Sender("http://tau:8080", "agent-secret", post=refuse))
    with pytest.raises(ReportRefused):
        a.report()


def test_a_bad_replay_line_is_one_line_with_its_number(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(LINES[0]) + "\n{not json\n")
    token = tmp_path / "token"
    token.write_text("agent-secret\n")
    argv = [
        "--server",
        "http://127.0.0.1:9",
        "--token-file",
        str(token),
        "--node",
        "gpu-1",
        "--replay",
        str(path),
        "--no-nvml",
        "--once",
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{path}:2: not JSON" in err and "Traceback" not in err
    assert main([*argv[:3], str(tmp_path / "missing"), *argv[4:]]) == 2
    assert "missing" in capsys.readouterr().err


def test_without_nvml_or_a_kernel_log_only_the_replay_is_read(tmp_path: Path) -> None:
    a = build("gpu-1", Sender("http://x", "t"), replay=replay(tmp_path), nvml=False)
    assert [s.name for s in a.sources] == ["replay"] and a.gpus == []
