"""The pure parts of the node group (executors/local/nodegroup.py): line prefixes, which
node failed first, and how the attempt ends from its nodes' ends."""

from __future__ import annotations

from typing import Any

import pytest

from taugrid.executors.local import nodegroup
from taugrid.executors.local.launchfile import check_launch
from taugrid.executors.local.logmask import SecretMasker
from taugrid.executors.local.nodegroup import (
    MAX_LINE_BYTES,
    NodeLines,
    combine,
    failure_words,
    first_failure,
    node_launch,
)

OK = {"outcome": "succeeded", "exit_code": 0, "signal": None, "oom": None}
STOPPED = {"outcome": "cancelled", "exit_code": 143, "signal": 15, "oom": None}


def ended(code: int, **more: Any) -> dict[str, Any]:
    return {"outcome": "failed", "exit_code": code, "signal": None, "oom": False, **more}


def test_lines_are_prefixed_and_passed_on_whole() -> None:
    lines = NodeLines(b"[node 1] ")
    assert lines.feed(b"one\ntw") == b"[node 1] one\n"
    assert lines.feed(b"o") == b""  # no line ended: nothing to write yet
    assert lines.feed(b"\n\nthree\n") == b"[node 1] two\n[node 1] \n[node 1] three\n"
    assert lines.feed(b"last, no newline") == b""
    assert lines.flush() == b"[node 1] last, no newline\n"
    assert lines.flush() == b""


def test_a_line_that_never_ends_is_cut() -> None:
    lines = NodeLines(b"[node 0] ")
    out = lines.feed(b"x" * (MAX_LINE_BYTES + 10))
    assert out == b"[node 0] " + b"x" * MAX_LINE_BYTES + b"\n"
    assert lines.flush() == b"[node 0] " + b"x" * 10 + b"\n"


def test_secrets_are_masked_before_the_prefix_even_split_across_reads() -> None:
    lines = NodeLines(b"[node 0] ", SecretMasker([b"hunter22"]))
    got = lines.feed(b"token=hun") + lines.feed(b"ter22 ok\nbye hunter") + lines.flush()
    assert got == b"[node 0] token=*** ok\n[node 0] bye hunter\n"
    assert b"hunter22" not in got


def test_the_first_failure_is_the_first_seen_not_the_lowest_node() -> None:
    assert first_failure([]) is None
    assert first_failure([(0, OK), (1, OK)]) is None
    assert first_failure([(0, OK), (2, ended(3)), (1, ended(1))]) == 2
    assert first_failure([(1, None), (0, ended(1))]) == 1  # gone without a result: failed
    assert first_failure([(1, STOPPED)]) == 1  # stopped by someone else: a failure too


@pytest.mark.parametrize(
    ("status", "how"),
    [
        (ended(3), "exited with code 3"),
        (ended(137, signal=9), "killed by signal 9"),
        (ended(137, signal=9, oom=True), "killed by the kernel's OOM killer"),
        (ended(127, error="cannot start the workload: x"), "cannot start the workload: x"),
        (
            {"outcome": "disk_full", "exit_code": 1, "detail": "the disk is full (5 bytes free)"},
            "the disk is full (5 bytes free)",
        ),
        (None, "its supervisor ended without a result"),
    ],
)
def test_failure_words(status: dict[str, Any] | None, how: str) -> None:
    assert (
        failure_words(1, 2, status, [0]) == f"node 1 of 2 failed first ({how}); node 0 was stopped"
    )


def test_failure_words_name_every_node_stopped() -> None:
    assert failure_words(2, 4, ended(1)) == "node 2 of 4 failed first (exited with code 1)"
    assert failure_words(2, 4, ended(1), [0, 1, 3]).endswith("; nodes 0, 1 and 3 were stopped")


def test_all_nodes_succeeded() -> None:
    outcome, fields = combine([OK, OK], None, None)
    assert outcome == "succeeded"
    assert (fields["exit_code"], fields["signal"], fields["failed_node"]) == (0, None, None)
    assert [n["node"] for n in fields["nodes"]] == [0, 1]


def test_the_failed_node_gives_the_attempt_its_exit() -> None:
    killed = ended(137, signal=9, oom=True)
    outcome, fields = combine([STOPPED, killed], 1, None, [0])
    assert outcome == "failed"
    assert (fields["exit_code"], fields["signal"], fields["oom"]) == (137, 9, True)
    assert fields["failed_node"] == 1 and fields["error"] is None
    assert fields["detail"] == (
        "node 1 of 2 failed first (killed by the kernel's OOM killer); node 0 was stopped"
    )
    assert fields["nodes"][0] == {
        "node": 0,
        "outcome": "cancelled",
        "exit_code": 143,
        "signal": 15,
        "oom": None,
    }


def test_a_node_that_cannot_start_is_a_start_failure_naming_it() -> None:
    outcome, fields = combine([STOPPED, ended(127, error="cannot start the workload: no")], 1, None)
    assert (outcome, fields["exit_code"]) == ("failed", 127)
    assert fields["error"] == "node 1: cannot start the workload: no"


def test_a_node_supervisor_gone_without_a_result_loses_the_attempt() -> None:
    outcome, fields = combine([None, STOPPED], 0, None, [1])
    assert outcome == "lost" and fields["failed_node"] == 0
    assert fields["error"].startswith("node 0 of 2 failed first (its supervisor ended")
    assert fields["nodes"][0]["outcome"] == "lost"


def test_disk_full_on_a_node_is_the_attempts() -> None:
    full = {"outcome": "disk_full", "exit_code": 1, "detail": "the disk holding TAU_HOME is full"}
    outcome, fields = combine([full, STOPPED], 0, None, [1])
    assert outcome == "disk_full" and "the disk holding TAU_HOME is full" in fields["detail"]


@pytest.mark.parametrize("stop", nodegroup.GROUP_STOPS)
def test_the_groups_own_stops_win(stop: str) -> None:
    outcome, fields = combine([STOPPED, STOPPED], None, stop, detail="over the limit")
    assert outcome == stop and fields["failed_node"] is None
    assert (fields["exit_code"], fields["signal"], fields["detail"]) == (143, 15, "over the limit")
    # Cancelled before any node started: no exit at all.
    assert combine([], None, stop)[1]["exit_code"] is None


def test_a_node_runs_its_command_in_the_runs_environment_plus_its_own() -> None:
    launch = {
        "command": "x",
        "env": {"A": "1", "CUDA_VISIBLE_DEVICES": "0,1"},
        "cwd": "/w",
        "timeout_s": 5.0,
        "disk_limit_bytes": 10,
        "notify": {"url": "u", "token_file": "t"},
        "outputs": ["out/"],
        "stop_grace_s": 3.0,
        "nodes": [{"command": ["a"], "env": {"NODE_RANK": "0"}}],
    }
    node = node_launch(
        launch, {"command": ["b"], "env": {"NODE_RANK": "1", "CUDA_VISIBLE_DEVICES": "1"}}
    )
    assert node["command"] == ["b"]
    assert node["env"] == {"A": "1", "CUDA_VISIBLE_DEVICES": "1", "NODE_RANK": "1"}
    # The group's: timeout, disk limit, outputs and the server; the grace is the node's too.
    assert (node["timeout_s"], node["disk_limit_bytes"], node["notify"]) == (None, None, None)
    assert (node["outputs"], node["nodes"], node["stop_grace_s"]) == ([], None, 3.0)
    assert check_launch(node) is None and check_launch(launch) is None


@pytest.mark.parametrize(
    ("nodes", "problem"),
    [
        ([], "nodes must be a non-empty list or null"),
        ("x", "nodes must be a non-empty list or null"),
        ([1], "nodes[0] is not an object"),
        ([{"command": "a", "env": {}}, {"command": [], "env": {}}], "nodes[1].command must"),
        ([{"command": "a", "env": {"A": 1}}], "nodes[0].env must map strings to strings"),
    ],
)
def test_bad_nodes_in_launch_json(nodes: object, problem: str) -> None:
    launch = {"command": "x", "env": {}, "cwd": "/w", "nodes": nodes}
    assert (check_launch(launch) or "").startswith(problem)
