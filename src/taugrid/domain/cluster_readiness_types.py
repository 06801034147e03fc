"""One line of ``tau admin cluster check``: which check, about what, its status, what
was found and how to fix it. Pure; shared by ``cluster_readiness`` and
``cluster_readiness_nodes``."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

OK = "ok"
WARN = "warn"  # worth knowing; the cluster is still ready
FAIL = "fail"  # runs would not work: not ready

NAMES_SHOWN = 10  # names listed on one line; the rest counted


@dataclass(frozen=True)
class Check:
    """``check`` is a stable name (``kueue-crds``, ``flavor``); ``subject`` what it is
    about when there are several (a flavor's name), else ""."""

    check: str
    status: str  # ok | warn | fail
    message: str
    fix: str = ""
    subject: str = ""

    @property
    def label(self) -> str:
        return f"{self.check} {self.subject}" if self.subject else self.check

    def to_dict(self) -> dict[str, str]:
        return {
            "check": self.check,
            "subject": self.subject,
            "status": self.status,
            "message": self.message,
            "fix": self.fix,
        }


def listed(names: Iterable[str], most: int = NAMES_SHOWN) -> str:
    """``a, b, c`` (at most ``most`` names, then ``and N more``)."""
    items = list(names)
    shown = ", ".join(items[:most])
    return f"{shown} and {len(items) - most} more" if len(items) > most else shown
