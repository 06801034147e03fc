"""Hypothesis properties of checkpoints and metrics files."""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from taugrid.sdk import checkpoint as ck
from taugrid.sdk import metrics

NAME = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_.-", min_size=1, max_size=8).filter(
    lambda s: s not in (".", "..", "tau-checkpoint.json")
)
REL = st.lists(NAME, min_size=1, max_size=3).map("/".join)
FILES = st.dictionaries(REL, st.binary(max_size=2048), min_size=1, max_size=6).filter(
    # no path may be both a file and a directory
    lambda fs: not any(a != b and b.startswith(a + "/") for a in fs for b in fs)
)
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def write_tree(d: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_bytes(data)


@SETTINGS
@given(files=FILES, step=st.integers(0, 10**12), use_write_files=st.booleans())
def test_manifest_describes_exactly_what_was_written(
    files: dict[str, bytes], step: int, use_write_files: bool
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        with ck.saving(step, root=root) as d:
            if use_write_files:
                ck.write_files(d, files)
            else:
                write_tree(d, files)
        path = root / f"step-{step:010d}"
        assert os.listdir(root) == [path.name]
        assert ck.verify(path) is None
        doc = json.loads((path / "tau-checkpoint.json").read_text())
        assert {f["path"]: (f["size"], f["sha256"]) for f in doc["files"]} == {
            rel: (len(data), hashlib.sha256(data).hexdigest()) for rel, data in files.items()
        }
        got = ck.latest(root=root)
        assert got is not None and got.step == step and got.size == sum(map(len, files.values()))


@SETTINGS
@given(files=FILES, data=st.data())
def test_any_change_to_any_file_is_caught(files: dict[str, bytes], data: st.DataObject) -> None:
    rel = data.draw(st.sampled_from(sorted(files)))
    content = files[rel]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        with ck.saving(1, root=root) as d:
            write_tree(d, files)
        path = root / "step-0000000001"
        kind = data.draw(st.sampled_from(["flip", "truncate", "append", "delete"]))
        if kind == "flip" and content:
            i = data.draw(st.integers(0, len(content) - 1))
            changed = content[:i] + bytes([content[i] ^ 0xFF]) + content[i + 1 :]
            (path / rel).write_bytes(changed)
            assert ck.verify(path) == f"sha256 mismatch of file {rel}"
            assert ck.verify(path, full=False) is None
        elif kind == "truncate" and content:
            (path / rel).write_bytes(content[:-1])
            assert ck.verify(path, full=False) == (
                f"size mismatch of file {rel}: manifest says {len(content)} bytes, "
                f"found {len(content) - 1}"
            )
        elif kind == "append":
            (path / rel).write_bytes(content + b"!")
            assert (ck.verify(path) or "").startswith(f"size mismatch of file {rel}")
        else:
            (path / rel).unlink()
            assert ck.verify(path) == f"missing file {rel}"
        if ck.verify(path) is not None:
            assert ck.latest(root=root) is None


VALUES = st.dictionaries(
    st.from_regex(r"[a-z_][a-z0-9_]{0,10}", fullmatch=True),
    st.one_of(st.integers(-(2**62), 2**62), st.floats(allow_nan=True, allow_infinity=True)),
    max_size=5,
)


@SETTINGS
@given(records=st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 2**40)), VALUES), max_size=8))
def test_metrics_roundtrip_and_any_truncation(
    records: list[tuple[int | None, dict[str, float]]],
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.jsonl"
        old = os.environ.get("TAU_METRICS_FILE")
        os.environ["TAU_METRICS_FILE"] = str(path)
        try:
            for step, values in records:
                metrics.log(step, **values)
        finally:
            if old is None:
                del os.environ["TAU_METRICS_FILE"]
            else:
                os.environ["TAU_METRICS_FILE"] = old
        got = metrics.read_metrics(path)
        assert [(r["step"], r["values"]) for r in got] == [
            (step, {k: v if math.isfinite(v) else None for k, v in values.items()})
            for step, values in records
        ]
        raw = path.read_bytes() if path.exists() else b""
        for cut in range(0, len(raw) + 1, max(1, len(raw) // 25)):
            path.write_bytes(raw[:cut])
            prefix = metrics.read_metrics(path)
            assert prefix == got[: len(prefix)]
            assert len(prefix) >= raw[:cut].count(b"\n")


@pytest.mark.parametrize("kind", ["step", "old", "del"])
@given(step=st.integers(0, 10**15))
def test_tmp_names_parse_back(kind: str, step: int) -> None:
    from taugrid.sdk import _writer

    assert _writer.parse_tmp_name(_writer.tmp_name(kind, step)) == (
        kind,
        step,
        os.getpid(),
        _writer.host_tag(),
    )
