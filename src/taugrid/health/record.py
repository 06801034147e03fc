"""Real NVML readings saved as fixtures (``tau admin health record FILE``): on a GPU
machine, every getter the NVML sources use, for every GPU, on every poll, error returns
included (``{"error": "NotSupported"}``), as JSON lines. It reads NVML directly: no
server, no store. The first line says what machine it was::

    {"type": "header", "at": ..., "driver_version": "570.86.15", "nvml_version": ...,
     "gpu_count": 8, "gpus": [{"index": 0, "uuid": "GPU-…", "name": "NVIDIA H100 …",
     "pci": "00000000:3B:00.0"}, ...]}
    {"type": "poll", "poll": 0, "at": ..., "index": 0, "uuid": "GPU-…", "device_count": 8,
     "readings": {"ecc_uncorrected_volatile": 0, "remapped_rows": [0, 0, 0, 0],
                  "recovery_action": 0, "temperature_gpu": 41,
                  "temperature_threshold_slowdown": 87,
                  "nvlink_state": {"0": 1, ..., "18": {"error": "InvalidArgument"}}},
     "ms": {"ecc_uncorrected_volatile": 0.04, ...}}

``ms`` is each call's latency (NVML's, measured here). A call that hangs stops the
recording (interrupt it): a hang is itself what the fixture should show.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import IO, Any

from taugrid.errors import TauError
from taugrid.health.nvml import (
    describe,
    error_name,
    field_value,
    load_nvml,
    recovery_field_id,
    shutdown,
    text,
)


class NvmlUnavailable(TauError):
    """No NVML to record from: no nvidia-ml-py, no driver, or no GPU."""

    code = "nvml_unavailable"
    exit_code = 1
    http_status = 503


def open_nvml(nvml: Any = None) -> Any:
    """The NVML module, initialized; raises :class:`NvmlUnavailable` with why, in a line."""
    module, why = load_nvml(nvml)
    if module is None:
        raise NvmlUnavailable(f"cannot record NVML readings: {why}")
    try:
        count = module.nvmlDeviceGetCount()
    except module.NVMLError as exc:
        shutdown(module)
        raise NvmlUnavailable(f"cannot record NVML readings: {describe(exc)}") from None
    if not count:
        shutdown(module)
        raise NvmlUnavailable("cannot record NVML readings: NVML sees no GPU")
    return module


def _call(nvml: Any, fn: Callable[..., Any], *args: Any) -> tuple[Any, float]:
    """What one NVML call returns, as JSON (or its error's name), and its latency in ms."""
    start = time.perf_counter()
    try:
        value: Any = _plain(fn(*args))
    except nvml.NVMLError as exc:
        value = {"error": error_name(nvml, exc)}
    return value, round((time.perf_counter() - start) * 1000, 3)


def _plain(value: Any) -> Any:
    if isinstance(value, bytes | str):
        return text(value)
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


def header(nvml: Any, at: float) -> dict[str, Any]:
    count, _ = _call(nvml, nvml.nvmlDeviceGetCount)
    gpus = []
    for i in range(count if isinstance(count, int) else 0):
        handle, _ = _call(nvml, nvml.nvmlDeviceGetHandleByIndex, i)
        if isinstance(handle, dict):
            gpus.append({"index": i, "handle": handle})
            continue
        pci, _ = _call(nvml, lambda h: text(nvml.nvmlDeviceGetPciInfo(h).busId), handle)
        gpus.append(
            {
                "index": i,
                "uuid": _call(nvml, nvml.nvmlDeviceGetUUID, handle)[0],
                "name": _call(nvml, nvml.nvmlDeviceGetName, handle)[0],
                "pci": pci,
            }
        )
    return {
        "type": "header",
        "at": at,
        "driver_version": _call(nvml, nvml.nvmlSystemGetDriverVersion)[0],
        "nvml_version": _call(nvml, nvml.nvmlSystemGetNVMLVersion)[0],
        "gpu_count": count,
        "gpus": gpus,
    }


def _recovery(nvml: Any, handle: Any) -> Any:
    field = nvml.nvmlDeviceGetFieldValues(handle, [recovery_field_id(nvml)])[0]
    if field.nvmlReturn != getattr(nvml, "NVML_SUCCESS", 0):
        raise nvml.NVMLError(field.nvmlReturn)
    return field_value(nvml, field)


def readings(nvml: Any, handle: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """Every getter of the NVML sources on one GPU: the readings and their latencies."""
    calls: dict[str, tuple[Callable[..., Any], tuple[Any, ...]]] = {
        "uuid": (nvml.nvmlDeviceGetUUID, (handle,)),
        "ecc_uncorrected_volatile": (
            nvml.nvmlDeviceGetTotalEccErrors,
            (handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC),
        ),
        "remapped_rows": (nvml.nvmlDeviceGetRemappedRows, (handle,)),
        "recovery_action": (lambda h: _recovery(nvml, h), (handle,)),
        "temperature_gpu": (nvml.nvmlDeviceGetTemperature, (handle, nvml.NVML_TEMPERATURE_GPU)),
        "temperature_threshold_slowdown": (
            nvml.nvmlDeviceGetTemperatureThreshold,
            (handle, nvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN),
        ),
    }
    values: dict[str, Any] = {}
    ms: dict[str, Any] = {}
    for key, (fn, args) in calls.items():
        values[key], ms[key] = _call(nvml, fn, *args)
    links: dict[str, Any] = {}
    link_ms: dict[str, float] = {}
    for link in range(nvml.NVML_NVLINK_MAX_LINKS):
        links[str(link)], link_ms[str(link)] = _call(
            nvml, nvml.nvmlDeviceGetNvLinkState, handle, link
        )
    values["nvlink_state"], ms["nvlink_state"] = links, link_ms
    return values, ms


def poll(nvml: Any, n: int, at: float) -> list[dict[str, Any]]:
    """One poll: a line per GPU (one with the error, for a GPU whose handle fails)."""
    count, _ = _call(nvml, nvml.nvmlDeviceGetCount)
    lines = []
    for i in range(count if isinstance(count, int) else 0):
        line: dict[str, Any] = {"type": "poll", "poll": n, "at": at, "index": i}
        line["device_count"] = count
        handle, _ = _call(nvml, nvml.nvmlDeviceGetHandleByIndex, i)
        if isinstance(handle, dict):
            line["handle"] = handle
        else:
            line["readings"], line["ms"] = readings(nvml, handle)
            line["uuid"] = line["readings"]["uuid"]
        lines.append(line)
    if not isinstance(count, int):
        lines.append({"type": "poll", "poll": n, "at": at, "device_count": count})
    return lines


def record(
    out: IO[str],
    nvml: Any,
    *,
    seconds: float,
    interval: float,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Write the header, then a poll every ``interval`` for ``seconds`` (one at least);
    each line flushed as written. Returns the number of polls. ``nvml`` is initialized
    (:func:`open_nvml`); the caller shuts it down (:func:`close_nvml`)."""
    start = clock()
    _write(out, header(nvml, start))
    n = 0
    while True:
        at = clock()
        for line in poll(nvml, n, at):
            _write(out, line)
        n += 1
        due = start + n * interval
        if due - start > seconds:
            return n
        sleep(max(0.0, due - clock()))


def close_nvml(nvml: Any) -> None:
    shutdown(nvml)


def _write(out: IO[str], line: dict[str, Any]) -> None:
    out.write(json.dumps(line, sort_keys=True, default=repr) + "\n")
    out.flush()
