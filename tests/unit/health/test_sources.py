"""The fault sources on this machine's CPU: kernel-log Xid lines (any line, however
malformed, parses to an Xid or nothing), replayed files refused with their line number,
and the watchdog that turns a hung read into an observation."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from taugrid.domain.health import Kind, Observation
from taugrid.health.kmsg import KmsgSource, normalize_pci, parse_xid_line
from taugrid.health.replay import ReplaySource, parse_lines
from taugrid.health.watchdog import Watched
from taugrid.ports.health import SourceError

LINE = (
    "[ 1234.567890] NVRM: Xid (PCI:0000:3b:00): 79, pid=0, name=python, GPU has fallen off the bus."
)


def test_the_drivers_xid_lines_parse_with_their_pci_address() -> None:
    found = parse_xid_line(LINE)
    assert found is not None and (found.pci, found.xid) == ("0000:3b:00", 79)
    assert found.detail.startswith("pid=0")
    kmsg = "6,1234,5678901,-;NVRM: Xid (PCI:0000:B1:00): 48, pid=1, An uncorrectable DBE"
    found = parse_xid_line(kmsg)
    assert found is not None and (found.pci, found.xid) == ("0000:b1:00", 48)
    assert normalize_pci("00000000:3B:00.0") == "0000:3b:00"
    for junk in ("", "NVRM: Xid", "NVRM: Xid (PCI:zz:3b:00): 79", "Xid 79", "x" * 10000 + LINE):
        assert parse_xid_line(junk) is None


@given(st.text(max_size=300))
def test_no_line_breaks_the_parser(line: str) -> None:
    found = parse_xid_line(line)
    assert found is None or found.xid >= 0


def test_the_kernel_log_is_read_from_where_it_was_and_names_gpus_by_pci(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("boot\n" + LINE + "\n")
    source = KmsgSource(
        str(log), node="n1", pci_to_gpu={"00000000:3B:00.0": "GPU-aaa"}, clock=lambda: 5.0
    )
    (obs,) = source.read(0)
    assert (obs.kind, obs.gpu_uuid, obs.xid, obs.at, obs.source) == (
        Kind.XID,
        "GPU-aaa",
        79,
        5.0,
        "kmsg",
    )
    assert source.read(0) == []  # nothing new
    with log.open("a") as f:
        f.write("NVRM: Xid (PCI:0000:5e:00): 13, pid=7, Graphics Exception\npartial")
    (obs,) = source.read(0)
    assert obs.gpu_uuid == "PCI:0000:5e:00" and obs.xid == 13  # NVML does not know it
    source.close()
    missing = KmsgSource(str(tmp_path / "none"), node="n1")
    assert not missing.available and "cannot read the kernel log" in missing.why


def test_a_replayed_file_is_refused_with_the_line_that_does_not_parse(tmp_path: Path) -> None:
    good = '{"kind": "xid", "gpu_uuid": "GPU-1", "node": "n1", "at": 10.0, "xid": 79}'
    text = f"# a drill\n{good}\n\n"
    (obs,) = parse_lines(text, "drill.jsonl")
    assert obs == Observation(Kind.XID, "GPU-1", "n1", 10.0, xid=79)
    for bad, says in (
        ("{not json", "drill.jsonl:2: not JSON"),
        ('{"kind": "xid", "gpu_uuid": "GPU-1", "node": "n1", "at": 1, "xid": -4}', "drill.jsonl:2"),
        ('{"kind": "xid", "node": "n1", "at": 1, "xid": 4, "colour": 1}', "unknown field"),
        ('{"kind": "xid", "gpu_uuid": "GPU-1", "node": "n1", "xid": 4}', "no at"),
        ("[1, 2]", "not a JSON object"),
    ):
        with pytest.raises(SourceError, match=says):
            parse_lines(f"{good}\n{bad}\n", "drill.jsonl")
    path = tmp_path / "day.jsonl"
    path.write_text('{"kind": "gpu_missing", "at": 3.0}\n')
    replay = ReplaySource(path, node="local")
    assert [o.kind for o in replay.read(0)] == [Kind.GPU_MISSING] and replay.read(0) == []


class _Hangs:
    name = "nvml-poll"
    available = True
    why = ""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls = 0

    def read(self, timeout_s: float) -> list[Observation]:
        self.calls += 1
        self.release.wait(30)
        return [Observation(Kind.THERMAL, "GPU-0", "n1", 9.0, value=95.0)]

    def close(self) -> None:
        self.release.set()


def test_a_hung_read_is_an_observation_and_the_source_is_not_read_again_meanwhile() -> None:
    source = _Hangs()
    watched = Watched(source, node="n1", deadline_s=0.05, clock=lambda: 42.0)
    (hang,) = watched.read(0)
    assert (hang.kind, hang.node, hang.at, hang.gpu_uuid) == (Kind.NVML_HANG, "n1", 42.0, "")
    assert watched.read(0) == [] and source.calls == 1  # still stuck: not called again
    source.release.set()
    for _ in range(100):
        if watched._busy is not None and not watched._busy.is_alive():
            break
        threading.Event().wait(0.01)
    (late,) = watched.read(0)  # what the stuck call returned, once it did
    assert late.kind is Kind.THERMAL and watched.hung_since is None


def test_an_absent_source_is_said_once(caplog: pytest.LogCaptureFixture) -> None:
    missing = KmsgSource(os.devnull + ".absent", node="n1")
    watched = Watched(missing, node="n1", deadline_s=1)
    assert watched.read(0) == [] and watched.read(0) == []
    said = [r.getMessage() for r in caplog.records if "reads nothing" in r.getMessage()]
    assert len(said) == 1
