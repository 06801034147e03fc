"""The NVML sources against a scripted pynvml (fake_nvml): each event and reading becomes
its observation, a getter a GPU does not support is skipped from then on, a lost GPU is
a missing one, the poll keeps its interval, a hung call is caught by the watchdog, and
an absent library or driver is said in one line. One test runs the real pynvml on a GPU
machine (-m gpu)."""

from __future__ import annotations

import logging
import subprocess
import sys
import time

import pytest
from fake_nvml import NVML_ERROR_DRIVER_NOT_LOADED, NVML_ERROR_LIBRARY_NOT_FOUND, FakeGpu, FakeNvml

from taugrid.domain.health import Kind, Observation
from taugrid.health.nvml import NvmlEventSource, NvmlPollSource, error_name, load_nvml
from taugrid.health.watchdog import Watched


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def kinds(obs: list[Observation]) -> list[tuple[Kind, str, object]]:
    return [(o.kind, o.gpu_uuid, o.xid if o.kind is Kind.XID else o.value) for o in obs]


def test_nvml_is_not_touched_before_the_first_read_and_pynvml_not_imported() -> None:
    nvml = FakeNvml()
    source = NvmlPollSource("n1", nvml=nvml)
    assert source.available and source.why == "" and nvml.calls == []
    code = "import sys, taugrid.health.nvml, taugrid.health.record; print('pynvml' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


# --- events ---


def test_xid_and_dbe_events_become_observations_with_the_gpus_uuid() -> None:
    nvml = FakeNvml([FakeGpu("GPU-0"), FakeGpu("GPU-1")])
    source = NvmlEventSource("n1", Clock(7.0), nvml)
    assert source.read(0.5) == []  # nothing yet: the wait timed out
    assert nvml.waits == [500] and nvml.registered == {0: 0xA, 1: 0xA}
    nvml.event(1, xid=79)
    nvml.event(0, dbe=True)
    obs = source.read(5)
    assert kinds(obs) == [(Kind.XID, "GPU-1", 79), (Kind.ECC_DBE, "GPU-0", 1)]
    assert {(o.node, o.at, o.source) for o in obs} == {("n1", 7.0, "nvml")}
    assert nvml.waits[1:] == [5000, 0, 0]  # then drained without waiting
    source.close()
    source.close()
    assert nvml.freed == 1 and nvml.shutdowns == 1 and source.read(1) == []


def test_the_older_event_wait_serves_when_v2_is_missing() -> None:
    nvml = FakeNvml()
    nvml.nvmlEventSetWait_v2 = None  # type: ignore[assignment,method-assign]
    nvml.event(0, xid=13)
    source = NvmlEventSource("n1", nvml=nvml)
    assert kinds(source.read(0)) == [(Kind.XID, "GPU-0", 13)]
    assert "nvmlEventSetWait" in nvml.calls


def test_gpus_that_cannot_register_events_are_skipped() -> None:
    nvml = FakeNvml([FakeGpu("GPU-0", unsupported={"nvmlDeviceRegisterEvents"}), FakeGpu("GPU-1")])
    source = NvmlEventSource("n1", nvml=nvml)
    assert source.read(0) == [] and source.available and nvml.registered == {1: 0xA}
    nvml = FakeNvml([FakeGpu("GPU-0", events=0x1)])  # single-bit ECC only
    source = NvmlEventSource("n1", nvml=nvml)
    assert source.read(0) == [] and not source.available
    assert "none of the 1 GPU" in source.why and nvml.shutdowns == 1


def test_an_event_from_a_lost_gpu_and_a_lost_wait_are_missing_gpus() -> None:
    nvml = FakeNvml([FakeGpu("GPU-0"), FakeGpu("GPU-1")])
    source = NvmlEventSource("n1", Clock(3.0), nvml)
    source.read(0)
    nvml.gpus[1].lost = True
    nvml.event(1, xid=79)
    assert kinds(source.read(0)) == [(Kind.GPU_MISSING, "GPU-1", None)]
    nvml.wait_error = nvml.NVML_ERROR_GPU_IS_LOST
    (missing,) = source.read(0)
    assert (missing.kind, missing.gpu_uuid) == (Kind.GPU_MISSING, "")  # the wait names none


def test_other_wait_errors_are_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    nvml = FakeNvml()
    source = NvmlEventSource("n1", nvml=nvml)
    nvml.wait_error = nvml.NVML_ERROR_UNKNOWN
    with caplog.at_level(logging.WARNING, "taugrid.health"):
        assert source.read(0) == [] and source.read(0) == []
    assert len([r for r in caplog.records if "event wait" in r.getMessage()]) == 1


# --- the library absent ---


@pytest.mark.parametrize("error", [NVML_ERROR_LIBRARY_NOT_FOUND, NVML_ERROR_DRIVER_NOT_LOADED])
def test_no_library_or_driver_reads_nothing_and_says_why_in_a_line(error: int) -> None:
    for cls in (NvmlEventSource, NvmlPollSource):
        source = cls("n1", nvml=FakeNvml(init_error=error))
        assert source.read(1) == [] and not source.available
        assert source.why.startswith("no NVIDIA driver here") and "\n" not in source.why
        source.close()


def test_without_pynvml_or_without_a_driver_the_real_path_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    source = NvmlPollSource("n1")
    assert source.read(0) == [] and not source.available and "pynvml" in source.why


def test_the_watchdog_says_an_absent_source_once(caplog: pytest.LogCaptureFixture) -> None:
    watched = Watched(
        NvmlEventSource("n1", nvml=FakeNvml(init_error=NVML_ERROR_LIBRARY_NOT_FOUND)),
        node="n1",
        deadline_s=1,
    )
    assert watched.read(0) == [] and not watched.available
    assert watched.read(0) == [] and watched.read(0) == []
    said = [r for r in caplog.records if "reads nothing" in r.getMessage()]
    assert len(said) == 2  # the source's first read, then the watchdog, once


def test_no_gpu_at_all_reads_nothing() -> None:
    source = NvmlPollSource("n1", nvml=FakeNvml([]))
    assert source.read(0) == [] and source.why == "NVML sees no GPU"


# --- the poll ---


def poll(gpus: list[FakeGpu]) -> tuple[FakeNvml, NvmlPollSource, Clock]:
    nvml = FakeNvml(gpus)
    clock = Clock()
    source = NvmlPollSource("n1", clock, nvml, interval_s=15)
    return nvml, source, clock


def again(source: NvmlPollSource, clock: Clock) -> list[Observation]:
    clock.now += source.interval_s
    return source.read(0)


def test_a_healthy_gpu_reads_nothing_and_the_interval_is_kept() -> None:
    nvml, source, clock = poll([FakeGpu("GPU-0", links=[1] * 18)])
    assert source.read(0) == []
    polled = len(nvml.calls)
    clock.now += 14.9
    assert source.read(0) == [] and len(nvml.calls) == polled  # not due: NVML not asked
    clock.now += 0.1
    assert source.read(0) == [] and len(nvml.calls) > polled
    gpu = nvml.gpus[0]
    gpu.temperature = 99
    clock.now += 1
    assert source.read(0) == []  # not due yet
    assert kinds(again(source, clock)) == [(Kind.THERMAL, "GPU-0", 99)]


def test_the_ecc_count_growing_is_its_delta() -> None:
    nvml, source, clock = poll([FakeGpu("GPU-0", ecc=2), FakeGpu("GPU-1")])
    assert source.read(0) == []  # the first reading is the baseline, whatever it is
    nvml.gpus[0].ecc = 5
    (obs,) = again(source, clock)
    assert (obs.kind, obs.gpu_uuid, obs.value, obs.source) == (
        Kind.ECC_DBE,
        "GPU-0",
        3,
        "nvml-poll",
    )
    assert obs.at == clock.now and "2 -> 5" in obs.detail
    assert again(source, clock) == []  # no growth since
    nvml.gpus[0].ecc = 0  # a reset clears the volatile count: the new baseline
    assert again(source, clock) == []
    nvml.gpus[0].ecc = 1
    assert kinds(again(source, clock)) == [(Kind.ECC_DBE, "GPU-0", 1)]


def test_remapped_rows_pending_and_failure() -> None:
    nvml, source, clock = poll([FakeGpu("GPU-0", remap=(0, 2, 1, 0))])
    assert kinds(source.read(0)) == [(Kind.REMAP_PENDING, "GPU-0", 2)]
    nvml.gpus[0].remap = (0, 9, 1, 1)
    assert kinds(again(source, clock)) == [
        (Kind.REMAP_PENDING, "GPU-0", 9),
        (Kind.REMAP_FAILURE, "GPU-0", 9),
    ]
    assert len(again(source, clock)) == 2  # not de-duplicated here: the classifier does


@pytest.mark.parametrize(
    ("number", "action"),
    [
        (1, "GPU_RESET"),
        (2, "NODE_REBOOT"),
        (3, "DRAIN_P2P"),
        (4, "DRAIN_AND_RESET"),
        (7, "NODE_REBOOT"),
    ],
)
def test_the_drivers_recovery_action(number: int, action: str) -> None:
    nvml, source, clock = poll([FakeGpu("GPU-0", recovery=number)])
    assert kinds(source.read(0)) == [(Kind.RECOVERY_ACTION, "GPU-0", action)]
    nvml.gpus[0].recovery = 0  # NONE: nothing to say
    assert again(source, clock) == []


def test_the_recovery_field_without_pynvmls_constant_uses_field_230() -> None:
    nvml, source, _ = poll([FakeGpu("GPU-0", recovery=1)])
    del nvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
    assert kinds(source.read(0)) == [(Kind.RECOVERY_ACTION, "GPU-0", "GPU_RESET")]


def test_the_recovery_field_not_supported_is_skipped_from_then_on() -> None:
    nvml, source, clock = poll([FakeGpu("GPU-0", recovery=1)])
    nvml.gpus[0].recovery_return = nvml.NVML_ERROR_NOT_SUPPORTED
    assert source.read(0) == []
    nvml.gpus[0].recovery_return = nvml.NVML_SUCCESS
    assert again(source, clock) == []
    assert nvml.calls.count("nvmlDeviceGetFieldValues") == 1


def test_a_link_up_at_the_first_poll_and_down_since() -> None:
    nvml, source, clock = poll([FakeGpu("GPU-0", links=[1, 1, 0, 1])])
    assert source.read(0) == []  # link 2 was down at the baseline: not a change
    nvml.gpus[0].links = [1, 0, 0, 1]
    (obs,) = again(source, clock)
    assert (obs.kind, obs.value) == (Kind.NVLINK_DOWN, 1) and "NVLink 1" in obs.detail
    nvml.gpus[0].links = [1, 0, 1, 0]
    assert kinds(again(source, clock)) == [
        (Kind.NVLINK_DOWN, "GPU-0", 1),
        (Kind.NVLINK_DOWN, "GPU-0", 3),
    ]
    # links past the GPU's own (InvalidArgument) are asked once each, then never again
    asked = nvml.calls.count("nvmlDeviceGetNvLinkState")
    again(source, clock)
    assert nvml.calls.count("nvmlDeviceGetNvLinkState") - asked == 4


def test_temperature_at_or_over_the_slowdown_threshold() -> None:
    nvml, source, clock = poll([FakeGpu("GPU-0", temperature=86, slowdown=87)])
    assert source.read(0) == []
    nvml.gpus[0].temperature = 87
    (obs,) = again(source, clock)
    assert (obs.kind, obs.value) == (Kind.THERMAL, 87) and "slowdown at 87" in obs.detail
    assert nvml.calls.count("nvmlDeviceGetTemperatureThreshold") == 1  # read once


def test_hardware_clock_slowdowns_on_a_change_and_not_a_power_cap() -> None:
    nvml, source, clock = poll([FakeGpu("GPU-0", clocks=0x4 | 0x1)])  # SW power cap, idle
    assert source.read(0) == []
    nvml.gpus[0].clocks = 0x4 | 0x40  # the hardware's thermal slowdown joins
    (obs,) = again(source, clock)
    assert (obs.kind, obs.value) == (Kind.CLOCK_SLOWDOWN, 0x40)
    assert "HW thermal slowdown" in obs.detail and "0x44" in obs.detail
    assert again(source, clock) == []  # the same slowdown: said once
    nvml.gpus[0].clocks = 0x40 | 0x80
    (obs,) = again(source, clock)
    assert obs.value == 0xC0 and "HW power brake" in obs.detail
    nvml.gpus[0].clocks = 0
    assert again(source, clock) == []
    nvml.gpus[0].unsupported.add("nvmlDeviceGetCurrentClocksEventReasons")
    nvml.gpus[0].clocks = 0x8
    assert again(source, clock) == []  # NotSupported: asked no more


def test_fewer_gpus_than_at_start_and_a_lost_gpu_are_missing() -> None:
    nvml, source, clock = poll([FakeGpu("GPU-0"), FakeGpu("GPU-1"), FakeGpu("GPU-2", ecc=1)])
    assert source.read(0) == []
    nvml.gpus[1].lost = True
    nvml.gpus[2].ecc = 4
    assert kinds(again(source, clock)) == [
        (Kind.GPU_MISSING, "GPU-1", None),
        (Kind.ECC_DBE, "GPU-2", 3),  # the others are still read
    ]
    nvml.count = 2
    obs = again(source, clock)
    assert kinds(obs) == [(Kind.GPU_MISSING, "", None), (Kind.GPU_MISSING, "GPU-1", None)]
    assert "2 of the 3" in obs[0].detail


def test_a_gpu_that_fails_at_start_is_missing() -> None:
    _, source, _ = poll([FakeGpu("GPU-0"), FakeGpu("GPU-1", lost=True)])
    (obs,) = source.read(0)
    assert (obs.kind, obs.gpu_uuid) == (Kind.GPU_MISSING, "") and "GPU 1" in obs.detail


def test_not_supported_getters_are_skipped_quietly_from_then_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    every = {
        "nvmlDeviceGetTotalEccErrors",
        "nvmlDeviceGetRemappedRows",
        "nvmlDeviceGetFieldValues",
        "nvmlDeviceGetTemperatureThreshold",
    }
    nvml, source, clock = poll([FakeGpu("GPU-0", unsupported=every), FakeGpu("GPU-1", ecc=1)])
    with caplog.at_level(logging.WARNING, "taugrid.health"):
        assert source.read(0) == []
        nvml.gpus[1].ecc = 2
        assert kinds(again(source, clock)) == [(Kind.ECC_DBE, "GPU-1", 1)]
    assert caplog.records == []  # not supported is no news
    # GPU-0 was asked each once; GPU-1 each twice, but the threshold once (it is kept)
    assert {fn: nvml.calls.count(fn) for fn in every} == {
        "nvmlDeviceGetTotalEccErrors": 3,
        "nvmlDeviceGetRemappedRows": 3,
        "nvmlDeviceGetFieldValues": 3,
        "nvmlDeviceGetTemperatureThreshold": 2,
    }
    assert nvml.calls.count("nvmlDeviceGetNvLinkState") == 2  # no NVLink: link 0, per GPU


def test_another_error_on_one_gpu_is_logged_once_and_the_others_are_read(
    caplog: pytest.LogCaptureFixture,
) -> None:
    nvml, source, clock = poll([FakeGpu("GPU-0"), FakeGpu("GPU-1")])
    nvml.gpus[0].errors["nvmlDeviceGetTotalEccErrors"] = nvml.NVML_ERROR_UNKNOWN
    nvml.gpus[0].temperature = nvml.gpus[1].temperature = 95
    with caplog.at_level(logging.WARNING, "taugrid.health"):
        assert kinds(source.read(0)) == [(Kind.THERMAL, "GPU-0", 95), (Kind.THERMAL, "GPU-1", 95)]
        again(source, clock)
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "ecc on GPU-0: Unknown Error" in said[0]
    assert nvml.calls.count("nvmlDeviceGetTotalEccErrors") == 4  # still asked: not "unsupported"


def test_error_names_are_pynvmls() -> None:
    nvml = FakeNvml()
    assert error_name(nvml, nvml.NVMLError(3)) == "NotSupported"
    assert error_name(nvml, nvml.NVMLError_GpuIsLost()) == "GpuIsLost"
    assert isinstance(nvml.NVMLError(10), nvml.NVMLError_Timeout)
    assert load_nvml(nvml) == (nvml, "")


# --- hangs ---


def test_a_hung_nvml_call_is_caught_by_the_watchdog() -> None:
    nvml, source, clock = poll([FakeGpu("GPU-0")])
    watched = Watched(source, node="n1", deadline_s=0.05, clock=lambda: 42.0)
    assert watched.read(0) == []
    nvml.hang = "nvmlDeviceGetTemperature"
    clock.now += 15
    (hang,) = watched.read(0)
    assert (hang.kind, hang.node, hang.at, hang.source) == (Kind.NVML_HANG, "n1", 42.0, "nvml-poll")
    assert watched.read(0) == []  # still stuck
    nvml.release.set()
    for _ in range(200):
        if watched._busy is not None and not watched._busy.is_alive():
            break
        time.sleep(0.01)
    assert watched.read(0) == [] and watched.hung_since is None


def test_a_hung_event_wait_is_caught_by_the_watchdog() -> None:
    nvml = FakeNvml()
    watched = Watched(NvmlEventSource("n1", nvml=nvml), node="n1", deadline_s=0.05)
    nvml.hang = "nvmlEventSetWait_v2"
    (hang,) = watched.read(0)
    assert hang.kind is Kind.NVML_HANG
    nvml.release.set()


# --- the real library (a GPU machine only) ---


@pytest.mark.gpu
def test_the_real_sources_read_a_real_gpu() -> None:
    events = NvmlEventSource("gpu-test")
    polls = NvmlPollSource("gpu-test", interval_s=1)
    try:
        deadline = time.monotonic() + 4
        seen: list[Observation] = []
        while time.monotonic() < deadline:
            seen += events.read(0.5)
            seen += polls.read(0)
            assert events.available, events.why
            assert polls.available, polls.why
        for obs in seen:  # a healthy machine says nothing; any reading must be well formed
            assert obs.node == "gpu-test" and obs.source in ("nvml", "nvml-poll")
    finally:
        events.close()
        polls.close()
