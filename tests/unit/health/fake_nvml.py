"""A scriptable stand-in for the ``pynvml`` module (nvidia-ml-py), for the NVML sources and
the recorder: the same names and values as the real module (errors with ``.value`` and
pynvml's subclasses), per-GPU readings a test sets, a queue of events, lost GPUs, and a
hang that blocks a call on an Event until the test releases it.

    nvml = FakeNvml([FakeGpu("GPU-0"), FakeGpu("GPU-1", links=[1, 1])])
    nvml.gpus[1].ecc = 3           # the next poll sees the count grow
    nvml.event(0, xid=79)          # the next event wait returns it
    nvml.gpus[0].lost = True       # every call on GPU 0 raises GPU_IS_LOST
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

# The real module's values (pynvml.py of nvidia-ml-py).
NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_UNKNOWN = 999

_STRINGS = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_TIMEOUT: "Timeout",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}


class NVMLError(Exception):
    """As pynvml's: ``NVMLError(value)`` is the subclass for that value."""

    _by_value: dict[int, type[NVMLError]] = {}

    def __new__(cls, value: int | None = None) -> NVMLError:
        if cls is NVMLError and value is not None:
            cls = NVMLError._by_value.get(value, NVMLError)
        obj = Exception.__new__(cls)
        obj.value = value if value is not None else getattr(cls, "_value", NVML_ERROR_UNKNOWN)
        return obj

    def __init__(self, value: int | None = None) -> None:
        super().__init__(self.value)

    value: int

    def __str__(self) -> str:
        return _STRINGS.get(self.value, f"NVML Error with code {self.value}")


def _subclass(name: str, value: int) -> type[NVMLError]:
    cls = type(name, (NVMLError,), {"_value": value})
    NVMLError._by_value[value] = cls
    return cls


NVMLError_Uninitialized = _subclass("NVMLError_Uninitialized", NVML_ERROR_UNINITIALIZED)
NVMLError_InvalidArgument = _subclass("NVMLError_InvalidArgument", NVML_ERROR_INVALID_ARGUMENT)
NVMLError_NotSupported = _subclass("NVMLError_NotSupported", NVML_ERROR_NOT_SUPPORTED)
NVMLError_NoPermission = _subclass("NVMLError_NoPermission", NVML_ERROR_NO_PERMISSION)
NVMLError_DriverNotLoaded = _subclass("NVMLError_DriverNotLoaded", NVML_ERROR_DRIVER_NOT_LOADED)
NVMLError_Timeout = _subclass("NVMLError_Timeout", NVML_ERROR_TIMEOUT)
NVMLError_LibraryNotFound = _subclass("NVMLError_LibraryNotFound", NVML_ERROR_LIBRARY_NOT_FOUND)
NVMLError_GpuIsLost = _subclass("NVMLError_GpuIsLost", NVML_ERROR_GPU_IS_LOST)
NVMLError_Unknown = _subclass("NVMLError_Unknown", NVML_ERROR_UNKNOWN)


@dataclass
class FakeGpu:
    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    pci: str = "00000000:3B:00.0"
    ecc: int = 0  # uncorrectable volatile ECC total
    remap: tuple[int, int, int, int] = (0, 0, 0, 0)  # corr, unc, pending, failure
    recovery: int = 0  # NVML_FI_DEV_GET_GPU_RECOVERY_ACTION's value
    recovery_return: int = NVML_SUCCESS  # the field's own nvmlReturn
    links: list[int] = field(default_factory=list)  # NVLink states; later links: InvalidArgument
    temperature: int = 40
    slowdown: int = 87
    clocks: int = 0  # nvmlDeviceGetCurrentClocksEventReasons' mask
    utilization: int = 0  # nvmlDeviceGetUtilizationRates().gpu, percent
    memory_used: int = 0  # nvmlDeviceGetMemoryInfo(), bytes
    memory_total: int = 80 << 30
    events: int = 0x8 | 0x2  # supported event types (Xid, DBE)
    lost: bool = False  # every call on it raises GPU_IS_LOST
    unsupported: set[str] = field(default_factory=set)  # function names: NotSupported
    errors: dict[str, int] = field(default_factory=dict)  # function name -> error value


class FakeNvml:
    """The module object: pynvml's constants and the functions the sources call."""

    NVMLError = NVMLError
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_Timeout = NVMLError_Timeout
    NVMLError_GpuIsLost = NVMLError_GpuIsLost
    NVMLError_LibraryNotFound = NVMLError_LibraryNotFound
    NVMLError_DriverNotLoaded = NVMLError_DriverNotLoaded
    NVMLError_InvalidArgument = NVMLError_InvalidArgument
    NVML_SUCCESS = NVML_SUCCESS
    NVML_ERROR_UNINITIALIZED = NVML_ERROR_UNINITIALIZED
    NVML_ERROR_INVALID_ARGUMENT = NVML_ERROR_INVALID_ARGUMENT
    NVML_ERROR_NOT_SUPPORTED = NVML_ERROR_NOT_SUPPORTED
    NVML_ERROR_NO_PERMISSION = NVML_ERROR_NO_PERMISSION
    NVML_ERROR_DRIVER_NOT_LOADED = NVML_ERROR_DRIVER_NOT_LOADED
    NVML_ERROR_TIMEOUT = NVML_ERROR_TIMEOUT
    NVML_ERROR_LIBRARY_NOT_FOUND = NVML_ERROR_LIBRARY_NOT_FOUND
    NVML_ERROR_GPU_IS_LOST = NVML_ERROR_GPU_IS_LOST
    NVML_ERROR_UNKNOWN = NVML_ERROR_UNKNOWN
    NVML_FEATURE_DISABLED = 0
    NVML_FEATURE_ENABLED = 1
    NVML_TEMPERATURE_GPU = 0
    NVML_TEMPERATURE_THRESHOLD_SHUTDOWN = 0
    NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1
    NVML_NVLINK_MAX_LINKS = 36
    NVML_VOLATILE_ECC = 0
    NVML_AGGREGATE_ECC = 1
    NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VALUE_TYPE_DOUBLE = 0
    NVML_VALUE_TYPE_UNSIGNED_INT = 1
    nvmlEventTypeDoubleBitEccError = 0x2
    nvmlEventTypeXidCriticalError = 0x8

    def __init__(self, gpus: list[FakeGpu] | None = None, *, init_error: int | None = None) -> None:
        self.gpus = list(gpus if gpus is not None else [FakeGpu("GPU-0")])
        self.count: int | None = None  # what nvmlDeviceGetCount says, when not len(gpus)
        self.init_error = init_error
        self.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION = 230  # an instance attribute: del-able
        self.queue: deque[tuple[int, int, int]] = deque()  # (GPU index, event type, data)
        self.wait_error: int | None = None
        self.waits: list[int] = []  # the timeouts (ms) of every event wait
        self.calls: list[str] = []
        self.hang: str | None = None  # a function name: its next call blocks on release
        self.release = threading.Event()
        self.inits = 0
        self.shutdowns = 0
        self.freed = 0
        self.registered: dict[int, int] = {}  # GPU index -> mask

    # --- scripting ---

    def event(self, index: int, *, xid: int | None = None, dbe: bool = False) -> None:
        if xid is not None:
            self.queue.append((index, self.nvmlEventTypeXidCriticalError, xid))
        if dbe:
            self.queue.append((index, self.nvmlEventTypeDoubleBitEccError, 0))

    def _enter(self, fn: str, handle: int | None = None) -> FakeGpu | None:
        self.calls.append(fn)
        if self.hang == fn:
            self.hang = None
            self.release.wait(10)
        if handle is None:
            return None
        gpu = self.gpus[handle]
        if gpu.lost:
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)
        if fn in gpu.unsupported:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        if fn in gpu.errors:
            raise NVMLError(gpu.errors[fn])
        return gpu

    # --- the library ---

    def nvmlInit(self) -> None:
        self._enter("nvmlInit")
        if self.init_error is not None:
            raise NVMLError(self.init_error)
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return "570.86.15"

    def nvmlSystemGetNVMLVersion(self) -> str:
        self._enter("nvmlSystemGetNVMLVersion")
        return "12.570.86.15"

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus) if self.count is None else self.count

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        self._enter("nvmlDeviceGetHandleByIndex", index)
        return index

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> SimpleNamespace:
        gpu = self._enter("nvmlDeviceGetUtilizationRates", handle)
        assert gpu is not None
        return SimpleNamespace(gpu=gpu.utilization, memory=0)

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        gpu = self._enter("nvmlDeviceGetMemoryInfo", handle)
        assert gpu is not None
        return SimpleNamespace(
            total=gpu.memory_total, used=gpu.memory_used, free=gpu.memory_total - gpu.memory_used
        )

    def nvmlDeviceGetUUID(self, handle: int) -> bytes:
        gpu = self._enter("nvmlDeviceGetUUID", handle)
        assert gpu is not None
        return gpu.uuid.encode()  # older pynvml: bytes

    def nvmlDeviceGetName(self, handle: int) -> str:
        gpu = self._enter("nvmlDeviceGetName", handle)
        assert gpu is not None
        return gpu.name

    def nvmlDeviceGetPciInfo(self, handle: int) -> SimpleNamespace:
        gpu = self._enter("nvmlDeviceGetPciInfo", handle)
        assert gpu is not None
        return SimpleNamespace(busId=gpu.pci.encode())

    def nvmlDeviceGetTotalEccErrors(self, handle: int, error_type: int, counter: int) -> int:
        gpu = self._enter("nvmlDeviceGetTotalEccErrors", handle)
        assert gpu is not None
        assert (error_type, counter) == (1, 0)  # uncorrected, volatile
        return gpu.ecc

    def nvmlDeviceGetRemappedRows(self, handle: int) -> tuple[int, int, int, int]:
        gpu = self._enter("nvmlDeviceGetRemappedRows", handle)
        assert gpu is not None
        return gpu.remap

    def nvmlDeviceGetFieldValues(self, handle: int, ids: list[int]) -> list[SimpleNamespace]:
        gpu = self._enter("nvmlDeviceGetFieldValues", handle)
        assert gpu is not None
        out = []
        for fid in ids:
            known = fid == 230
            value = SimpleNamespace(uiVal=gpu.recovery if known else 0, dVal=0.0)
            ret = gpu.recovery_return if known else NVML_ERROR_NOT_SUPPORTED
            out.append(SimpleNamespace(fieldId=fid, nvmlReturn=ret, valueType=1, value=value))
        return out

    def nvmlDeviceGetNvLinkState(self, handle: int, link: int) -> int:
        gpu = self._enter("nvmlDeviceGetNvLinkState", handle)
        assert gpu is not None
        if not gpu.links:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        if link >= len(gpu.links):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return gpu.links[link]

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        gpu = self._enter("nvmlDeviceGetTemperature", handle)
        assert gpu is not None and sensor == self.NVML_TEMPERATURE_GPU
        return gpu.temperature

    def nvmlDeviceGetTemperatureThreshold(self, handle: int, threshold: int) -> int:
        gpu = self._enter("nvmlDeviceGetTemperatureThreshold", handle)
        assert gpu is not None and threshold == self.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
        return gpu.slowdown

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: int) -> int:
        gpu = self._enter("nvmlDeviceGetCurrentClocksEventReasons", handle)
        assert gpu is not None
        return gpu.clocks

    def nvmlEventSetCreate(self) -> str:
        self._enter("nvmlEventSetCreate")
        return "event-set"

    def nvmlEventSetFree(self, event_set: Any) -> None:
        self._enter("nvmlEventSetFree")
        self.freed += 1

    def nvmlDeviceGetSupportedEventTypes(self, handle: int) -> int:
        gpu = self._enter("nvmlDeviceGetSupportedEventTypes", handle)
        assert gpu is not None
        return gpu.events

    def nvmlDeviceRegisterEvents(self, handle: int, mask: int, event_set: Any) -> None:
        self._enter("nvmlDeviceRegisterEvents", handle)
        assert event_set == "event-set"
        self.registered[handle] = mask

    def nvmlEventSetWait_v2(self, event_set: Any, timeout_ms: int) -> SimpleNamespace:
        self._enter("nvmlEventSetWait_v2")
        return self._wait(event_set, timeout_ms)

    def nvmlEventSetWait(self, event_set: Any, timeout_ms: int) -> SimpleNamespace:
        self._enter("nvmlEventSetWait")
        return self._wait(event_set, timeout_ms)

    def _wait(self, event_set: Any, timeout_ms: int) -> SimpleNamespace:
        assert event_set == "event-set" and isinstance(timeout_ms, int)
        self.waits.append(timeout_ms)
        if self.wait_error is not None:
            raise NVMLError(self.wait_error)
        if not self.queue:
            raise NVMLError(NVML_ERROR_TIMEOUT)
        index, kind, data = self.queue.popleft()
        return SimpleNamespace(
            device=index,
            eventType=kind,
            eventData=data,
            gpuInstanceId=0xFFFFFFFF,
            computeInstanceId=0xFFFFFFFF,
        )
