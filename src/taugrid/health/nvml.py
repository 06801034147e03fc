"""The NVML sources over nvidia-ml-py: the Xid/DBE event loop (:class:`NvmlEventSource`)
and the poll (:class:`NvmlPollSource`: ECC, remapped rows, the driver's recovery action,
NVLink, temperature, the GPU count).

``pynvml`` is imported only here, inside functions, and only when no module is injected
(``nvml=``: tests pass a fake with the same names). Nothing touches NVML before the first
``read``, which the monitor runs under its watchdog (an ``nvmlInit`` can hang as any NVML
call can): until then ``available`` is True (not known absent); a first read that finds
no library, no driver or no GPU makes it False, with ``why`` in one line, and reads
nothing from then on.

Pitfalls this follows: events are per process and start at registration (the kernel-log
source catches what came before); after Xid 79 a GPU's calls raise ``GPU_IS_LOST``; a
getter that answers ``NOT_SUPPORTED`` for a GPU is not asked again for that GPU.
"""

from __future__ import annotations

import ctypes
import logging
import string
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from taugrid.domain.health import Kind, Observation, RecoveryAction

log = logging.getLogger("taugrid.health")

RECOVERY_ACTION_FIELD = 230  # NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, where pynvml lacks it
DRAIN_EVENTS = 64  # events taken at most per read after the first (a wait of 0 ms each)
# NVML's recovery actions past the five of domain.health, by their number: the bus reset
# is a reset, the system reboot a reboot; 5 (RECOVER_IMEX_DOMAIN) names no GPU fault.
_RECOVERY = {
    **dict(enumerate(RecoveryAction)),  # NONE 0, GPU_RESET 1, ... DRAIN_AND_RESET 4
    6: RecoveryAction.GPU_RESET,
    7: RecoveryAction.NODE_REBOOT,
}
_VALUE_FIELDS = (  # c_nvmlValue_t's member for each NVML_VALUE_TYPE_*
    ("NVML_VALUE_TYPE_DOUBLE", "dVal"),
    ("NVML_VALUE_TYPE_UNSIGNED_INT", "uiVal"),
    ("NVML_VALUE_TYPE_UNSIGNED_LONG", "ulVal"),
    ("NVML_VALUE_TYPE_UNSIGNED_LONG_LONG", "ullVal"),
    ("NVML_VALUE_TYPE_SIGNED_LONG_LONG", "sllVal"),
    ("NVML_VALUE_TYPE_SIGNED_INT", "siVal"),
    ("NVML_VALUE_TYPE_UNSIGNED_SHORT", "usVal"),
)


# --- helpers shared by the sources and the recorder (taugrid.health.record) ---------------


def load_nvml(nvml: Any = None) -> tuple[Any, str]:
    """The NVML module, initialized (``nvmlInit``), and ""; or None and why not, in a line."""
    if nvml is None:
        try:
            import pynvml
        except ImportError:
            return None, "nvidia-ml-py (import pynvml) is not installed"
        nvml = pynvml
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        if is_error(nvml, exc, "LIBRARY_NOT_FOUND", "DRIVER_NOT_LOADED"):
            return None, f"no NVIDIA driver here: NVML cannot start ({describe(exc)})"
        return None, f"NVML cannot start: {describe(exc)}"
    except OSError as exc:  # a broken libnvidia-ml.so
        return None, f"NVML cannot start: {exc}"
    return nvml, ""


def shutdown(nvml: Any) -> None:
    try:
        nvml.nvmlShutdown()
    except nvml.NVMLError as exc:
        log.debug("GPU health: nvmlShutdown: %s", describe(exc))


def text(value: str | bytes) -> str:
    """NVML's strings (UUIDs, names, versions) are bytes in older pynvml, str in newer."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def is_error(nvml: Any, exc: BaseException, *names: str) -> bool:
    """Whether ``exc`` is one of NVML's errors ``NVML_ERROR_<name>`` (by its ``value``)."""
    value = getattr(exc, "value", None)
    return value is not None and any(value == getattr(nvml, f"NVML_ERROR_{n}", -1) for n in names)


def error_name(nvml: Any, exc: BaseException) -> str:
    """pynvml's name for an NVML error, as its class is named: "NotSupported", "GpuIsLost"."""
    value = getattr(exc, "value", None)
    for attr in dir(nvml):
        if attr.startswith("NVML_ERROR_") and getattr(nvml, attr) == value:
            return string.capwords(attr.removeprefix("NVML_ERROR_"), "_").replace("_", "")
    return f"NVMLError{value}"


def describe(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # pynvml's __str__ asks the library, which may be gone
        return f"NVML error {getattr(exc, 'value', '?')}"


def field_value(nvml: Any, field: Any) -> float | int:
    """One ``c_nvmlFieldValue_t``'s value, read from the union member its type names."""
    for const, member in _VALUE_FIELDS:
        if field.valueType == getattr(nvml, const, None):
            return getattr(field.value, member)  # type: ignore[no-any-return]
    return field.value.uiVal  # type: ignore[no-any-return]


def recovery_field_id(nvml: Any) -> int:
    return int(getattr(nvml, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", RECOVERY_ACTION_FIELD))


def handle_key(handle: Any) -> Any:
    """A hashable key for a device handle: the address behind pynvml's ctypes pointer."""
    if isinstance(handle, ctypes._Pointer):
        return ctypes.cast(handle, ctypes.c_void_p).value
    return handle


@dataclass(frozen=True)
class NvmlGpu:
    index: int
    handle: Any  # None when the GPU did not answer at start
    uuid: str  # "" likewise


def open_gpus(nvml: Any) -> list[NvmlGpu]:
    """Every GPU NVML counts, with its handle and UUID (None and "" for one that fails)."""
    out = []
    for i in range(nvml.nvmlDeviceGetCount()):
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            out.append(NvmlGpu(i, handle, text(nvml.nvmlDeviceGetUUID(handle))))
        except nvml.NVMLError as exc:
            log.warning("GPU health: NVML GPU %d does not answer at start: %s", i, describe(exc))
            out.append(NvmlGpu(i, None, ""))
    return out


class _Nvml:
    """What both sources share: NVML opened at the first read, and closed once."""

    name = ""

    def __init__(self, node: str, clock: Callable[[], float], nvml: Any) -> None:
        self.node = node
        self._clock = clock
        self._injected = nvml
        self._nvml: Any = None
        self._tried = False
        self.why = ""
        self._logged: set[tuple[str, str]] = set()

    @property
    def available(self) -> bool:
        return not self.why

    def _open(self) -> Any:
        """The NVML module once started (the first call starts it); None when absent."""
        if not self._tried:
            self._tried = True
            self._nvml, self.why = load_nvml(self._injected)
            if self._nvml is not None:
                try:
                    self.why = self._start(self._nvml)
                except self._nvml.NVMLError as exc:
                    self.why = f"NVML cannot list the GPUs: {describe(exc)}"
                if self.why:
                    shutdown(self._nvml)
                    self._nvml = None
            if self.why:
                log.warning("GPU health: %s reads nothing: %s", self.name, self.why)
        return self._nvml

    def _start(self, nvml: Any) -> str:
        raise NotImplementedError

    def _stop(self, nvml: Any) -> None:
        pass

    def _once(self, key: tuple[str, str], message: str, *args: object) -> None:
        if key not in self._logged:
            self._logged.add(key)
            log.warning(message, *args)

    def _missing(self, uuid: str, now: float, detail: str) -> Observation:
        return Observation(Kind.GPU_MISSING, uuid, self.node, now, detail=detail, source=self.name)

    def close(self) -> None:
        nvml, self._nvml = self._nvml, None
        self._tried = True
        if nvml is not None:
            self._stop(nvml)
            shutdown(nvml)


# --- the event loop ------------------------------------------------------------------------


class NvmlEventSource(_Nvml):
    """Xid and double-bit ECC events as NVML delivers them (``nvmlEventSetWait_v2``)."""

    name = "nvml-event"
    source = "nvml"

    def __init__(self, node: str, clock: Callable[[], float] = time.time, nvml: Any = None) -> None:
        super().__init__(node, clock, nvml)
        self._set: Any = None
        self._uuids: dict[Any, str] = {}  # handle_key -> UUID, for a GPU lost since

    def _start(self, nvml: Any) -> str:
        gpus = [g for g in open_gpus(nvml) if g.handle is not None]
        wanted = nvml.nvmlEventTypeXidCriticalError | nvml.nvmlEventTypeDoubleBitEccError
        self._set = nvml.nvmlEventSetCreate()
        for g in gpus:
            try:
                mask = wanted & nvml.nvmlDeviceGetSupportedEventTypes(g.handle)
                if mask:
                    nvml.nvmlDeviceRegisterEvents(g.handle, mask, self._set)
                    self._uuids[handle_key(g.handle)] = g.uuid
            except nvml.NVMLError as exc:
                if not is_error(nvml, exc, "NOT_SUPPORTED"):
                    log.warning("GPU health: no NVML events from %s: %s", g.uuid, describe(exc))
        if not self._uuids:
            self._stop(nvml)
            return f"NVML delivers Xid/ECC events for none of the {len(gpus)} GPU(s)"
        return ""

    def _stop(self, nvml: Any) -> None:
        if self._set is not None:
            try:
                nvml.nvmlEventSetFree(self._set)
            except nvml.NVMLError as exc:
                log.debug("GPU health: nvmlEventSetFree: %s", describe(exc))
            self._set = None

    def read(self, timeout_s: float) -> list[Observation]:
        nvml = self._open()
        if nvml is None or self._set is None:
            return []
        wait = getattr(nvml, "nvmlEventSetWait_v2", None) or nvml.nvmlEventSetWait
        out: list[Observation] = []
        ms = max(0, int(timeout_s * 1000))
        for _ in range(DRAIN_EVENTS + 1):
            try:
                data = wait(self._set, ms)
            except nvml.NVMLError as exc:
                if not is_error(nvml, exc, "TIMEOUT"):
                    out.extend(self._wait_failed(nvml, exc))
                break
            out.extend(self._event(nvml, data))
            ms = 0  # then take what else is queued, without waiting
        return out

    def _wait_failed(self, nvml: Any, exc: BaseException) -> list[Observation]:
        if is_error(nvml, exc, "GPU_IS_LOST"):  # the wait names no GPU: a node reading
            detail = "the NVML event wait says a GPU is lost"
            return [self._missing("", self._clock(), detail)]
        self._once(("", error_name(nvml, exc)), "GPU health: NVML event wait: %s", describe(exc))
        return []

    def _event(self, nvml: Any, data: Any) -> list[Observation]:
        now = self._clock()
        try:
            uuid = text(nvml.nvmlDeviceGetUUID(data.device))
        except nvml.NVMLError as exc:
            uuid = self._uuids.get(handle_key(data.device), "")
            if is_error(nvml, exc, "GPU_IS_LOST"):
                return [self._missing(uuid, now, "NVML: the GPU is lost")]
            if not uuid:
                self._once(("", "uuid"), "GPU health: an NVML event's GPU: %s", describe(exc))
                return []
        out = []
        if data.eventType & nvml.nvmlEventTypeXidCriticalError:
            xid = int(data.eventData)
            out.append(Observation(Kind.XID, uuid, self.node, now, xid=xid, source=self.source))
        if data.eventType & nvml.nvmlEventTypeDoubleBitEccError:
            out.append(Observation(Kind.ECC_DBE, uuid, self.node, now, value=1, source=self.source))
        return out


# --- the poll ------------------------------------------------------------------------------


class _GpuLost(Exception):
    pass


_NA = object()  # a getter this GPU does not answer (NOT_SUPPORTED, or another error)


# nvmlClocksEventReason* bits the hardware sets itself (NVML's values).
HW_SLOWDOWN_BITS = (
    (0x8, "HW slowdown"),
    (0x40, "HW thermal slowdown"),
    (0x80, "HW power brake"),
)
HW_SLOWDOWN_MASK = 0x8 | 0x40 | 0x80


class NvmlPollSource(_Nvml):
    """Every ``interval_s``, each GPU's counters and states, against what it read before."""

    name = "nvml-poll"

    def __init__(
        self,
        node: str,
        clock: Callable[[], float] = time.time,
        nvml: Any = None,
        interval_s: float = 15.0,
    ) -> None:
        super().__init__(node, clock, nvml)
        self.interval_s = interval_s
        self._last: float | None = None
        self._gpus: list[NvmlGpu] = []
        self._unsupported: set[tuple[int, str]] = set()  # (GPU index, getter)
        self._ecc: dict[int, int] = {}  # the last uncorrectable volatile count
        self._links: dict[int, frozenset[int]] = {}  # the links up at the first poll
        self._slowdown: dict[int, int] = {}
        self._clock_mask: dict[int, int] = {}  # the hardware slowdown bits seen last

    def _start(self, nvml: Any) -> str:
        self._gpus = open_gpus(nvml)
        return "" if self._gpus else "NVML sees no GPU"

    def read(self, timeout_s: float) -> list[Observation]:
        nvml = self._open()
        if nvml is None:
            return []
        now = self._clock()
        if self._last is not None and now - self._last < self.interval_s:
            return []
        self._last = now
        out = self._count(nvml, now)
        for g in self._gpus:
            if g.handle is None:
                out.append(self._missing("", now, f"GPU {g.index} did not answer NVML at start"))
                continue
            try:
                for step in (self._ecc_delta, self._remap, self._recovery, self._nvlink):
                    out.extend(step(nvml, g, now))
                out.extend(self._thermal(nvml, g, now))
                out.extend(self._clocks(nvml, g, now))
            except _GpuLost:
                out.append(self._missing(g.uuid, now, "NVML: the GPU is lost"))
        return out

    def _get(self, nvml: Any, g: NvmlGpu, getter: str, fn: Any, *args: Any) -> Any:
        """``fn(handle, *args)``, or _NA: NOT_SUPPORTED is remembered, other errors logged."""
        if (g.index, getter) in self._unsupported:
            return _NA
        try:
            return fn(g.handle, *args)
        except nvml.NVMLError as exc:
            if is_error(nvml, exc, "GPU_IS_LOST"):
                raise _GpuLost from None
            if is_error(nvml, exc, "NOT_SUPPORTED") or (
                getter.startswith("nvlink") and is_error(nvml, exc, "INVALID_ARGUMENT")
            ):
                self._unsupported.add((g.index, getter))
                log.debug("GPU health: %s does not answer %s", g.uuid, getter)
            else:
                self._once(
                    (g.uuid, getter), "GPU health: %s on %s: %s", getter, g.uuid, describe(exc)
                )
            return _NA

    def _obs(self, kind: Kind, g: NvmlGpu, now: float, value: Any, detail: str) -> Observation:
        return Observation(
            kind, g.uuid, self.node, now, value=value, detail=detail, source=self.name
        )

    def _count(self, nvml: Any, now: float) -> list[Observation]:
        try:
            count = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError as exc:
            self._once(("", "count"), "GPU health: nvmlDeviceGetCount: %s", describe(exc))
            return []
        if count >= len(self._gpus):
            return []
        detail = f"NVML counts {count} of the {len(self._gpus)} GPUs it counted at start"
        return [self._missing("", now, detail)]

    def _ecc_delta(self, nvml: Any, g: NvmlGpu, now: float) -> list[Observation]:
        total = self._get(
            nvml,
            g,
            "ecc",
            nvml.nvmlDeviceGetTotalEccErrors,
            nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
            nvml.NVML_VOLATILE_ECC,
        )
        if total is _NA:
            return []
        before = self._ecc.get(g.index)
        self._ecc[g.index] = total  # a lower count (the GPU was reset) is the new baseline
        if before is None or total <= before:
            return []
        detail = f"uncorrectable volatile ECC count {before} -> {total}"
        return [self._obs(Kind.ECC_DBE, g, now, total - before, detail)]

    def _remap(self, nvml: Any, g: NvmlGpu, now: float) -> list[Observation]:
        rows = self._get(nvml, g, "remap", nvml.nvmlDeviceGetRemappedRows)
        if rows is _NA:
            return []
        _corr, unc, pending, failure = rows
        out = []
        if pending:
            out.append(self._obs(Kind.REMAP_PENDING, g, now, unc, f"{unc} uncorrectable rows"))
        if failure:
            out.append(self._obs(Kind.REMAP_FAILURE, g, now, unc, f"{unc} uncorrectable rows"))
        return out

    def _recovery(self, nvml: Any, g: NvmlGpu, now: float) -> list[Observation]:
        fid = recovery_field_id(nvml)
        values = self._get(nvml, g, "recovery", nvml.nvmlDeviceGetFieldValues, [fid])
        if values is _NA:
            return []
        field = values[0]
        if field.nvmlReturn != getattr(nvml, "NVML_SUCCESS", 0):
            exc = nvml.NVMLError(field.nvmlReturn)
            if is_error(nvml, exc, "GPU_IS_LOST"):
                raise _GpuLost
            if is_error(nvml, exc, "NOT_SUPPORTED"):
                self._unsupported.add((g.index, "recovery"))
            else:
                what = describe(exc)
                self._once(
                    (g.uuid, "recovery"), "GPU health: field %d on %s: %s", fid, g.uuid, what
                )
            return []
        number = int(field_value(nvml, field))
        if number == 0:
            return []
        action = _RECOVERY.get(number)
        if action is None:
            self._once(
                (g.uuid, f"action{number}"), "GPU health: %s: recovery action %d", g.uuid, number
            )
            return []
        return [
            self._obs(Kind.RECOVERY_ACTION, g, now, action.value, f"NVML field {fid} = {number}")
        ]

    def _nvlink(self, nvml: Any, g: NvmlGpu, now: float) -> list[Observation]:
        up: set[int] = set()
        down: set[int] = set()
        for link in range(nvml.NVML_NVLINK_MAX_LINKS):
            state = self._get(nvml, g, f"nvlink{link}", nvml.nvmlDeviceGetNvLinkState, link)
            if link == 0 and (g.index, "nvlink0") in self._unsupported:
                return []  # no NVLink on this GPU: not asked again
            if state is not _NA:
                (up if state == nvml.NVML_FEATURE_ENABLED else down).add(link)
        baseline = self._links.setdefault(g.index, frozenset(up))
        return [
            self._obs(Kind.NVLINK_DOWN, g, now, link, f"NVLink {link} was up at the first poll")
            for link in sorted(baseline & down)
        ]

    def _thermal(self, nvml: Any, g: NvmlGpu, now: float) -> list[Observation]:
        if g.index not in self._slowdown:
            limit = self._get(
                nvml,
                g,
                "slowdown",
                nvml.nvmlDeviceGetTemperatureThreshold,
                nvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN,
            )
            if limit is _NA or not limit:
                return []
            self._slowdown[g.index] = limit
        limit = self._slowdown[g.index]
        degrees = self._get(
            nvml, g, "temperature", nvml.nvmlDeviceGetTemperature, nvml.NVML_TEMPERATURE_GPU
        )
        if degrees is _NA or degrees < limit:
            return []
        return [self._obs(Kind.THERMAL, g, now, degrees, f"{degrees} C, slowdown at {limit} C")]

    def _clocks(self, nvml: Any, g: NvmlGpu, now: float) -> list[Observation]:
        """The hardware's own clock slowdowns (HW slowdown, HW thermal, power brake), on a
        change: a software power cap or an idle GPU is normal operation, not a symptom."""
        fn = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )
        if fn is None:
            return []
        mask = self._get(nvml, g, "clocks", fn)
        if mask is _NA:
            return []
        hw = int(mask) & HW_SLOWDOWN_MASK
        before = self._clock_mask.get(g.index, 0)
        self._clock_mask[g.index] = hw
        if not hw or hw == before:
            return []
        names = [name for bit, name in HW_SLOWDOWN_BITS if hw & bit]
        detail = f"clocks slowed: {', '.join(names)} (reasons 0x{int(mask):x})"
        return [self._obs(Kind.CLOCK_SLOWDOWN, g, now, hw, detail)]
