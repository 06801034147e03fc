"""The fault source port: where GPU-health observations come from (the NVML event loop
and poll, the kernel log, a replayed file for tests, demos and drills; ``tau admin health
inject`` hands its observation to the monitor directly, as a scripted source would).

Contract for implementations:

- ``read(timeout_s)`` returns the observations since the last call, already normalized
  (``domain.health.Observation``: which GPU on which node, when, what). It may block up
  to ``timeout_s`` waiting for the next one (an event wait), and must not block much
  longer: the monitor runs every call under a watchdog (``taugrid.health.watchdog``),
  and a call past its deadline is itself an observation (``nvml_hang``), never a hang of
  the monitor.
- A malformed record from outside (a kernel-log line, a replayed line) is skipped or
  refused with its line number (``SourceError``), never raised as anything else; a
  source whose library or device is absent says so once (``available`` False, with
  ``why``) and reads nothing.
- ``close()`` is idempotent.
"""

from __future__ import annotations

from typing import Protocol

from taugrid.domain.health import Observation
from taugrid.errors import TauError


class SourceError(TauError):
    code = "health_source_invalid"
    exit_code = 2
    http_status = 422


class FaultSource(Protocol):
    name: str  # "nvml-event", "nvml-poll", "kmsg", "replay"

    @property
    def available(self) -> bool: ...

    @property
    def why(self) -> str:
        """Why the source reads nothing (its library or device is absent); "" if it reads."""
        ...

    def read(self, timeout_s: float) -> list[Observation]: ...

    def close(self) -> None: ...
