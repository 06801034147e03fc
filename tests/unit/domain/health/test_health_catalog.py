"""The vendored Xid catalog: equal to the reference table, parsed into levels, cached."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from servicecheck import require_service
from taugrid.domain.health import CatalogError, Level, load_catalog, parse_catalog
from taugrid.domain.health.catalog import catalog_text

# tests/unit/domain/health/<this file>: parents[4] is the repository's root.
REPO = Path(__file__).resolve().parents[4]
SHARED_CSV = REPO / ".." / "shared" / "reference" / "xid-catalog.csv"
HEADER = "xid,meaning,nvidia_bucket,level,action,notes\n"


def test_vendored_csv_equals_the_shared_reference() -> None:
    require_service(SHARED_CSV.is_file(), f"the reference catalog {SHARED_CSV} is not here")
    assert catalog_text() == SHARED_CSV.read_text("utf-8")


def test_every_row_is_parsed() -> None:
    rows = list(csv.DictReader(catalog_text().splitlines()))
    cat = load_catalog()
    assert len(cat.entries) + 1 == len(rows)  # every Xid once, plus the unknown row
    assert cat.unknown.level is Level.L5 and cat.unknown.xid is None
    for row in rows:
        if row["xid"] == "unknown":
            continue
        entry = cat.entries[int(row["xid"])]
        assert entry.meaning == row["meaning"] and entry.action == row["action"]
        if row["level"] == "driver":
            assert entry.level is None
        else:
            assert entry.level is not None and entry.level.name == row["level"]


@pytest.mark.parametrize(
    ("xid", "level", "fatal"),
    [(13, Level.L1, False), (43, Level.L0, False), (48, Level.L2, True), (54, Level.L4, True),
     (61, Level.L2, False), (79, Level.L3, True), (151, Level.L3, True), (154, None, False)],
)  # fmt: skip
def test_levels_and_fatal_flags(xid: int, level: Level | None, fatal: bool) -> None:
    entry = load_catalog().entries[xid]
    assert (entry.level, entry.fatal) == (level, fatal)


def test_names_drop_the_tables_emphasis() -> None:
    assert load_catalog().entries[64].name == "DRAM retirement/remap failure"


def test_the_catalog_is_parsed_once() -> None:
    assert load_catalog() is load_catalog()


def test_level_words() -> None:
    assert [lv.word for lv in Level] == [
        "info", "job fault", "GPU fault", "node fault", "RMA candidate", "unknown",
    ]  # fmt: skip
    assert Level.L4 > Level.L2


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("xid,meaning\n", "header"),
        (HEADER + "8,a,b,L9,c,\nunknown,-,C,L5,d,\n", "level"),
        (HEADER + "8,a,b,L1,c,\n8,a,b,L1,c,\nunknown,-,C,L5,d,\n", "twice"),
        (HEADER + "-3,a,b,L1,c,\nunknown,-,C,L5,d,\n", "non-negative"),
        (HEADER + "8,a,b,L1,c,\n", "unknown"),
        (HEADER + "8,a,b,L1\n", "fields"),
        ("", "header"),
    ],
)
def test_a_malformed_catalog_is_refused(text: str, match: str) -> None:
    with pytest.raises(CatalogError, match=match):
        parse_catalog(text)
