"""``tau admin health record``: NVML readings saved as JSON lines, errors included, from a
scripted pynvml (fake_nvml); without NVML it says why in one line and exits 1."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from fake_nvml import NVML_ERROR_LIBRARY_NOT_FOUND, FakeGpu, FakeNvml

from fakeclock import SleepingClock
from taugrid.cli.commands import admin_health_record
from taugrid.errors import TauError
from taugrid.health.record import NvmlUnavailable, open_nvml, record


def recorded(nvml: FakeNvml, seconds: float, interval: float) -> tuple[int, list[dict]]:  # type: ignore[type-arg]
    out = io.StringIO()
    clock = SleepingClock(100.0)
    polls = record(
        out, open_nvml(nvml), seconds=seconds, interval=interval, clock=clock, sleep=clock.sleep
    )
    return polls, [json.loads(line) for line in out.getvalue().splitlines()]


def test_every_getter_of_every_gpu_on_every_poll_with_its_errors() -> None:
    nvml = FakeNvml(
        [
            FakeGpu("GPU-0", ecc=2, remap=(1, 2, 1, 0), recovery=1, links=[1, 0], temperature=90),
            FakeGpu("GPU-1", name="NVIDIA A100", unsupported={"nvmlDeviceGetRemappedRows"}),
        ]
    )
    nvml.gpus[1].recovery_return = nvml.NVML_ERROR_NOT_SUPPORTED
    polls, lines = recorded(nvml, seconds=30, interval=15)
    assert polls == 3 and len(lines) == 1 + 3 * 2
    head = lines[0]
    assert head["type"] == "header" and head["driver_version"] == "570.86.15"
    assert head["gpu_count"] == 2
    assert [(g["uuid"], g["name"]) for g in head["gpus"]] == [
        ("GPU-0", "NVIDIA H100 80GB HBM3"),
        ("GPU-1", "NVIDIA A100"),
    ]
    assert [(p["poll"], p["at"], p["uuid"]) for p in lines[1:]] == [
        (0, 100.0, "GPU-0"),
        (0, 100.0, "GPU-1"),
        (1, 115.0, "GPU-0"),
        (1, 115.0, "GPU-1"),
        (2, 130.0, "GPU-0"),
        (2, 130.0, "GPU-1"),
    ]
    first, second = lines[1]["readings"], lines[2]["readings"]
    assert first["ecc_uncorrected_volatile"] == 2 and first["remapped_rows"] == [1, 2, 1, 0]
    assert first["recovery_action"] == 1 and first["temperature_gpu"] == 90
    assert first["temperature_threshold_slowdown"] == 87
    assert first["nvlink_state"]["0"] == 1 and first["nvlink_state"]["1"] == 0
    assert first["nvlink_state"]["2"] == {"error": "InvalidArgument"}
    assert len(first["nvlink_state"]) == nvml.NVML_NVLINK_MAX_LINKS
    assert second["remapped_rows"] == {"error": "NotSupported"}
    assert second["recovery_action"] == {"error": "NotSupported"}
    assert second["nvlink_state"]["0"] == {"error": "NotSupported"}
    assert set(lines[1]["ms"]) == set(first)  # a latency for every getter


def test_a_lost_gpu_is_recorded_with_its_error() -> None:
    nvml = FakeNvml([FakeGpu("GPU-0"), FakeGpu("GPU-1")])
    out = io.StringIO()
    module = open_nvml(nvml)
    nvml.gpus[1].lost = True
    clock = SleepingClock(100.0)
    assert record(out, module, seconds=0, interval=1, clock=clock, sleep=clock.sleep) == 1
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert lines[0]["gpus"][1] == {"index": 1, "handle": {"error": "GpuIsLost"}}
    assert lines[2] == {
        "type": "poll",
        "poll": 0,
        "at": 100.0,
        "index": 1,
        "device_count": 2,
        "handle": {"error": "GpuIsLost"},
    }


def test_without_nvml_it_is_refused_with_why() -> None:
    with pytest.raises(NvmlUnavailable, match="no NVIDIA driver here") as caught:
        open_nvml(FakeNvml(init_error=NVML_ERROR_LIBRARY_NOT_FOUND))
    assert isinstance(caught.value, TauError) and caught.value.exit_code == 1
    assert caught.value.code == "nvml_unavailable" and "\n" not in caught.value.message
    with pytest.raises(NvmlUnavailable, match="no GPU"):
        open_nvml(FakeNvml([]))


def test_the_command_exits_1_without_nvml_and_writes_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "pynvml", None)  # no nvidia-ml-py
    assert (admin_health_record.record,) == admin_health_record.COMMANDS
    target = tmp_path / "out.jsonl"
    result = CliRunner().invoke(admin_health_record.record, [str(target), "--seconds", "0"])
    assert isinstance(result.exception, NvmlUnavailable) and "pynvml" in str(result.exception)
    assert not target.exists()


def test_the_command_records_with_the_real_entry_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml([FakeGpu("GPU-0")]))
    target = tmp_path / "out.jsonl"
    result = CliRunner().invoke(admin_health_record.record, [str(target), "--seconds", "0"])
    assert result.exit_code == 0, result.output
    assert "recorded 1 poll(s)" in result.output
    assert [json.loads(x)["type"] for x in target.read_text().splitlines()] == ["header", "poll"]
