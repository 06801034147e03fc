"""taugrid.log() lines and read_metrics()."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
import time
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from taugrid.sdk import metrics


@pytest.fixture
def mfile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "metrics.jsonl"
    monkeypatch.setenv("TAU_METRICS_FILE", str(path))
    return path


def lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_one_json_line_per_call(mfile: Path) -> None:
    before = time.time()
    metrics.log(10, loss=0.25, lr=3e-4, tokens=4096)
    metrics.log(loss=0.5)
    after = time.time()
    first, second = lines(mfile)
    assert first["step"] == 10 and first["values"] == {"loss": 0.25, "lr": 3e-4, "tokens": 4096}
    assert isinstance(first["values"]["tokens"], int)  # type: ignore[index]
    assert before <= first["time"] <= after  # type: ignore[operator]
    assert second["step"] is None and second["values"] == {"loss": 0.5}
    assert mfile.read_bytes().endswith(b"\n")


def test_non_finite_floats_become_null(mfile: Path) -> None:
    metrics.log(1, a=math.nan, b=math.inf, c=-math.inf, d=np.float32("nan"), e=1.5)
    assert lines(mfile)[0]["values"] == {"a": None, "b": None, "c": None, "d": None, "e": 1.5}


def test_numeric_like_values_are_converted(mfile: Path) -> None:
    metrics.log(
        np.int64(3),  # type: ignore[arg-type]
        flag=True,
        f32=np.float32(0.5),
        i64=np.int64(7),
        arr0=np.array(2.5),
        dec=Decimal("0.25"),  # type: ignore[arg-type]
        frac=Fraction(1, 4),  # type: ignore[arg-type]
    )
    rec = lines(mfile)[0]
    assert rec["step"] == 3
    assert rec["values"] == {
        "flag": 1,
        "f32": 0.5,
        "i64": 7,
        "arr0": 2.5,
        "dec": 0.25,
        "frac": 0.25,
    }


@pytest.mark.parametrize("bad", ["1.0", b"1", None, [1.0], {"a": 1}, 1j, object()])
def test_non_numeric_values_are_rejected(mfile: Path, bad: object) -> None:
    with pytest.raises(TypeError, match="is not a number"):
        metrics.log(1, x=bad)  # type: ignore[arg-type]
    assert not mfile.exists() or mfile.read_text() == ""


@pytest.mark.parametrize("bad", ["1", 1.5, True])
def test_step_must_be_an_int(mfile: Path, bad: object) -> None:
    with pytest.raises(TypeError, match="step"):
        metrics.log(bad, x=1.0)  # type: ignore[arg-type]


def test_unset_file_warns_once_and_does_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(metrics, "_warned", False)
    metrics.log(1, loss=1.0)
    metrics.log(2, loss=1.0)
    err = capsys.readouterr().err
    assert err.count("TAU_METRICS_FILE is not set") == 1
    with pytest.raises(TypeError):  # values are still checked
        metrics.log(3, loss="x")  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_follows_a_changed_metrics_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    monkeypatch.setenv("TAU_METRICS_FILE", str(a))
    metrics.log(1, x=1)
    monkeypatch.setenv("TAU_METRICS_FILE", str(b))
    metrics.log(2, x=2)
    assert [r["step"] for r in lines(a)] == [1]
    assert [r["step"] for r in lines(b)] == [2]


def test_threads_never_interleave(mfile: Path) -> None:
    def worker(k: int) -> None:
        for i in range(500):
            metrics.log(i, **{f"metric_{k}_{j}": float(i * j) for j in range(20)})

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    recs = lines(mfile)  # every line parses
    assert len(recs) == 8 * 500
    for k in range(8):
        mine = [r for r in recs if f"metric_{k}_0" in r["values"]]  # type: ignore[operator]
        assert [r["step"] for r in mine] == list(range(500))  # in order per thread


def test_processes_append_to_the_same_file(mfile: Path) -> None:
    code = (
        "import sys\nfrom taugrid.sdk.metrics import log\n"
        "for i in range(300): log(i, proc=int(sys.argv[1]), pad=1.0)\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code, str(k)]) for k in range(4)]
    assert [p.wait(timeout=60) for p in procs] == [0] * 4
    recs = lines(mfile)
    assert len(recs) == 1200
    assert sorted({r["values"]["proc"] for r in recs}) == [0, 1, 2, 3]  # type: ignore[index]


def test_thousands_of_calls_per_second(mfile: Path) -> None:
    n = 5000
    t0 = time.perf_counter()
    for i in range(n):
        metrics.log(i, loss=0.1, lr=1e-3, grad_norm=1.0)
    elapsed = time.perf_counter() - t0
    assert len(lines(mfile)) == n
    assert elapsed < 5.0, f"{n / elapsed:.0f} calls/s"  # ~100k/s on an idle laptop


def test_a_cut_line_left_by_a_crash_does_not_swallow_the_next(
    mfile: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mfile.write_bytes(b'{"step": 1, "time": 1.0, "values": {}}\n{"step": 2, "ti')
    monkeypatch.setattr(metrics, "_fd", None)
    monkeypatch.setattr(metrics, "_fd_path", None)
    metrics.log(3, x=1.0)
    assert [r["step"] for r in metrics.read_metrics(mfile)] == [1, 3]


def test_read_metrics_tolerates_a_truncated_last_line(mfile: Path) -> None:
    for i in range(5):
        metrics.log(i, loss=float(i))
    data = mfile.read_bytes()
    full = metrics.read_metrics(mfile)
    assert [r["step"] for r in full] == [0, 1, 2, 3, 4]
    assert full[2]["values"] == {"loss": 2.0}
    for cut in range(len(data) + 1):
        mfile.write_bytes(data[:cut])
        got = metrics.read_metrics(mfile)
        assert got == full[: len(got)]
        assert len(got) == data[:cut].count(b"\n") or (
            len(got) == data[:cut].count(b"\n") + 1 and data[:cut].endswith(b"}")
        )


def test_read_metrics_missing_file_and_garbage(tmp_path: Path) -> None:
    assert metrics.read_metrics(tmp_path / "nope") == []
    p = tmp_path / "m"
    p.write_bytes(b'garbage\n\n[1]\n{"step": 1, "time": 2.0, "values": {"a": 1}}\n')
    assert metrics.read_metrics(p) == [{"step": 1, "time": 2.0, "values": {"a": 1}}]
