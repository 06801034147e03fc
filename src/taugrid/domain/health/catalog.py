"""The Xid catalog: what each NVIDIA Xid means and which health level it starts at. Pure.

The table is NVIDIA's resolution bucket per Xid (Ampere and newer) with the project's
level and action (docs: shared/reference/gpu-health.md, section 3). It ships inside the
package as ``xid_catalog.csv``, a verbatim copy of the reference table, because an
installed TauGrid has no checkout beside it; a test keeps the two equal. It is read with
``importlib.resources`` (a wheel or a zip import works as well as a source tree), parsed
once and cached: the classifier looks an Xid up on every event.

Two rows are not plain levels: Xid 154 ("GPU recovery action changed") says to follow the
driver's recovery action, so its entry has no level of its own (``level is None``: the
recovery-action reading decides); and the ``unknown`` row is the entry for every Xid the
table does not list, kept apart as :attr:`Catalog.unknown`.
"""

from __future__ import annotations

import csv
import functools
import io
from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from importlib import resources
from types import MappingProxyType

COLUMNS = ("xid", "meaning", "nvidia_bucket", "level", "action", "notes")
DRIVER_LEVEL = "driver"  # the level column of Xid 154: the driver's recovery action decides
UNKNOWN_XID = "unknown"


class Level(IntEnum):
    """Health levels, ordered by how much of the machine they take out of service."""

    L0 = 0  # info: a metric and an event only
    L1 = 1  # job fault: the job restarts from its checkpoint, no device action
    L2 = 2  # GPU fault: quarantine that GPU, evict only its pods
    L3 = 3  # node fault: cordon and taint the node, evict all its GPU pods
    L4 = 4  # RMA candidate: stay out of service, a human decides
    L5 = 5  # unknown: fail closed (cordon, no eviction), a human decides

    @property
    def word(self) -> str:
        """The level's name in words ("GPU fault"), for reasons and logs."""
        return LEVEL_WORDS[self]


LEVEL_WORDS: Mapping[Level, str] = MappingProxyType(
    {
        Level.L0: "info",
        Level.L1: "job fault",
        Level.L2: "GPU fault",
        Level.L3: "node fault",
        Level.L4: "RMA candidate",
        Level.L5: "unknown",
    }
)


class CatalogError(ValueError):
    """The catalog text is not the table this module reads (a bad header, level or Xid)."""


@dataclass(frozen=True)
class XidEntry:
    """One row of the catalog."""

    xid: int | None  # None for the ``unknown`` row
    meaning: str
    bucket: str  # NVIDIA's resolution bucket, with (F) fatal or (NF) non-fatal
    level: Level | None  # None: follow the driver's recovery action (Xid 154)
    action: str
    notes: str

    @property
    def fatal(self) -> bool:
        """Whether NVIDIA's bucket marks the Xid fatal: those count toward an RMA."""
        return self.bucket.rstrip().endswith("(F)")

    @property
    def name(self) -> str:
        """The meaning as plain words (the table's markdown emphasis dropped)."""
        return self.meaning.replace("**", "")


@dataclass(frozen=True)
class Catalog:
    entries: Mapping[int, XidEntry]
    unknown: XidEntry

    def get(self, xid: int) -> XidEntry | None:
        return self.entries.get(xid)


def _level(text: str, line: int) -> Level | None:
    if text == DRIVER_LEVEL:
        return None
    if len(text) == 2 and text[0] == "L" and text[1].isdigit() and int(text[1]) <= 5:
        return Level(int(text[1]))
    raise CatalogError(f"line {line}: level {text!r} is not L0..L5 or {DRIVER_LEVEL!r}")


def parse_catalog(text: str) -> Catalog:
    """Parse the catalog's CSV text; each Xid once, and exactly one ``unknown`` row."""
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    if header is None or tuple(h.strip() for h in header) != COLUMNS:
        raise CatalogError(f"the header is {header!r}, not {','.join(COLUMNS)}")
    entries: dict[int, XidEntry] = {}
    unknown: XidEntry | None = None
    for line, row in enumerate(reader, start=2):
        if not row:
            continue
        if len(row) != len(COLUMNS):
            raise CatalogError(f"line {line}: {len(row)} fields, not {len(COLUMNS)}")
        xid_text, meaning, bucket, level_text, action, notes = (f.strip() for f in row)
        level = _level(level_text, line)
        if xid_text == UNKNOWN_XID:
            if unknown is not None or level is None:
                raise CatalogError(f"line {line}: a second or level-less unknown row")
            unknown = XidEntry(None, meaning, bucket, level, action, notes)
            continue
        if not xid_text.isdigit():
            raise CatalogError(f"line {line}: Xid {xid_text!r} is not a non-negative number")
        xid = int(xid_text)
        if xid in entries:
            raise CatalogError(f"line {line}: Xid {xid} is listed twice")
        entries[xid] = XidEntry(xid, meaning, bucket, level, action, notes)
    if unknown is None:
        raise CatalogError("no 'unknown' row: unlisted Xids would have no level")
    return Catalog(MappingProxyType(entries), unknown)


def catalog_text() -> str:
    """The vendored CSV's text, as shipped in the package."""
    return resources.files("taugrid.domain.health").joinpath("xid_catalog.csv").read_text("utf-8")


@functools.cache
def load_catalog() -> Catalog:
    """The vendored catalog, parsed on the first call and shared after it (immutable)."""
    return parse_catalog(catalog_text())
