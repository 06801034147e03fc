"""`tau metrics`: CSV and table formatting, key selection, attempt filter."""

from __future__ import annotations

import csv
import io
import json

import pytest
from clifakes import FakeClient, invoke

from taugrid.cli.commands.metrics import csv_cell, metric_keys, select, to_csv, to_table
from taugrid.errors import NotFound

SERIES = [
    {"attempt": 0, "step": 0, "time": 1795990000.5, "values": {"loss": 2.5, "lr": 0.1}},
    {"attempt": 0, "step": 10, "time": 1795990001.25, "values": {"loss": None, "acc": 0.5}},
    {"attempt": 1, "step": None, "time": 1795990002.0, "values": {"eval_loss": 1e-05}},
    {"attempt": 1, "step": 20, "time": 1795990003.0, "values": {"loss": 0.1 + 0.2}},
]


def test_keys_in_order_of_first_appearance() -> None:
    assert metric_keys(SERIES) == ["loss", "lr", "acc", "eval_loss"]


def test_csv_header_empty_cells_and_full_precision() -> None:
    text = to_csv(SERIES, metric_keys(SERIES))
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[0] == ["step", "time", "attempt", "loss", "lr", "acc", "eval_loss"]
    assert rows[1] == ["0", "1795990000.5", "0", "2.5", "0.1", "", ""]
    assert rows[2] == ["10", "1795990001.25", "0", "", "", "0.5", ""]  # null -> empty
    assert rows[3] == ["", "1795990002.0", "1", "", "", "", "1e-05"]  # no step
    assert rows[4][3] == "0.30000000000000004"  # nothing lost
    assert text.endswith("\n") and "\r" not in text


def test_csv_cells() -> None:
    assert csv_cell(None) == "" and csv_cell(3) == "3" and csv_cell(float("nan")) == "nan"
    assert csv_cell(float("inf")) == "inf"


def test_select_keeps_points_with_a_chosen_key() -> None:
    chosen = select(SERIES, ["acc", "eval_loss"])
    assert [p["step"] for p in chosen] == [10, None]
    assert chosen[0]["values"] == {"acc": 0.5}


def test_table_columns() -> None:
    lines = to_table(SERIES, ["loss", "acc"]).splitlines()
    assert lines[0].split() == ["STEP", "TIME", "ATTEMPT", "LOSS", "ACC"]
    assert lines[1].split()[-1] == "2.5"  # acc absent: blank
    assert lines[2].split()[-2:] == ["-", "0.5"]  # loss logged as null: "-"
    assert lines[4].split()[-1] == "0.3"


def test_command_csv_key_and_attempt(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeClient()
    fake.series = SERIES
    result = invoke(monkeypatch, "metrics", fake, "metrics", "r1", "--csv", "--key", "loss")
    assert result.exit_code == 0
    assert result.stdout.splitlines() == [
        "step,time,attempt,loss",
        "0,1795990000.5,0,2.5",
        "10,1795990001.25,0,",
        "20,1795990003.0,1,0.30000000000000004",
    ]
    result = invoke(monkeypatch, "metrics", fake, "metrics", "r1", "--attempt", "1", "-o", "json")
    assert fake.metrics_asked[-1] == 1
    assert json.loads(result.stdout) == {"run_id": "r1", "series": SERIES[2:], "gpu": []}


def test_command_unknown_key_and_no_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeClient()
    fake.series = SERIES
    result = invoke(monkeypatch, "metrics", fake, "metrics", "r1", "--key", "nope")
    # An error, not a warning followed by "no metrics" and exit 0: main() prints it, exits 5.
    assert isinstance(result.exception, NotFound) and result.stdout == ""
    assert result.exception.message == (
        "no metric named nope in run r1 (it has: loss, lr, acc, eval_loss)"
    )
    assert result.exception.exit_code == 5
    fake.series = []
    result = invoke(monkeypatch, "metrics", fake, "metrics", "r1")
    assert result.stdout == "run r1 has logged no metrics yet\n"
    result = invoke(monkeypatch, "metrics", fake, "metrics", "r1", "--csv")
    assert result.stdout == "step,time,attempt\n"


def test_a_running_runs_gpu_use_follows_the_table_and_rides_in_json(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeClient()
    fake.series = SERIES
    fake.gpu = [
        {"time": 1795990010.0, "utilization_pct": 97.0, "memory_used_bytes": 3 << 30},
        {"time": 1795990025.0, "utilization_pct": 2.0, "memory_used_bytes": 1 << 29},
    ]
    out = invoke(monkeypatch, "metrics", fake, "metrics", "r1").stdout
    tail = out.split("GPU use (sampled by the server, the busiest GPU):\n")[1].splitlines()
    assert tail[0].split() == ["TIME", "GPU", "UTIL", "MEMORY", "GIB"]
    assert tail[1].split()[-2:] == ["97%", "3.00"] and tail[2].split()[-2:] == ["2%", "0.50"]
    data = json.loads(invoke(monkeypatch, "metrics", fake, "metrics", "r1", "-o", "json").stdout)
    assert data["gpu"] == fake.gpu
    # --csv stays the workload's metrics only: a file a script reads has one shape.
    csv_out = invoke(monkeypatch, "metrics", fake, "metrics", "r1", "--csv").stdout
    assert "GPU" not in csv_out
