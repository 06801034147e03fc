"""Checkpoints and outputs in object storage, against a real S3 API (moto's server):
the pod's sidecar (``podhelper sync-checkpoints``, a real process) uploads only what the
SDK has committed while a real SDK writer writes; the server's reader picks the resume
point as the local store does (a corrupted newer checkpoint skipped with its problem);
``fetch-resume`` downloads exactly that one; outputs are listed and served; and bad
URLs, buckets, endpoints and credentials are one line with no secret in it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from s3server import KEY_ID, SECRET, S3Server, s3  # noqa: F401  (s3: the fixture)
from taugrid.errors import NotFound
from taugrid.executors.objectstore import ObjectStoreArtifacts
from taugrid.objfs import Location, StorageError, open_fs
from taugrid.podstorage import CheckpointSync
from taugrid.sdk.checkpoint import newest_verified, saving, verify

RUN = "train-q4m8z"
MANIFEST = "tau-checkpoint.json"

WRITER = textwrap.dedent(
    """
    import os, sys, time
    from taugrid.sdk.checkpoint import saving
    for step in range(1, int(sys.argv[1]) + 1):
        with saving(step) as d:
            (d / "w.bin").write_bytes(os.urandom(300_000 + step))
            time.sleep(0.15)  # half-written: the sidecar passes by meanwhile
            (d / "opt").mkdir()
            (d / "opt" / "m.bin").write_bytes(os.urandom(1000 * step))
            time.sleep(0.15)
    """
)


@pytest.fixture
def loc(s3: S3Server) -> Location:  # noqa: F811
    return Location(f"s3://{s3.bucket()}/team/b", s3.endpoint)


def reader(loc: Location) -> ObjectStoreArtifacts:
    return ObjectStoreArtifacts(loc, key=KEY_ID, secret=SECRET)


def helper_env(s3: S3Server, loc: Location, run_dir: Path, **extra: str) -> dict[str, str]:  # noqa: F811
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "TAU_"))}
    env.update(s3.env())
    env.update(
        TAU_STORAGE_URL=loc.url,
        TAU_STORAGE_ENDPOINT=loc.endpoint_url or "",
        TAU_RUN_ID=RUN,
        TAU_CHECKPOINT_DIR=str(run_dir / "checkpoints"),
        TAU_OUTPUT_DIR=str(run_dir / "outputs"),
        **extra,
    )
    return env


def helper(command: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "taugrid.podhelper", command],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def write_local(root: Path, steps: list[int]) -> dict[int, bytes]:
    """Checkpoints written by the SDK in this process; the bytes of each one's w.bin."""
    data = {}
    for step in steps:
        with saving(step, root=root) as d:
            data[step] = os.urandom(4096) + step.to_bytes(4, "big")
            (d / "w.bin").write_bytes(data[step])
        time.sleep(0.01)  # distinct manifest times
    return data


def flip_a_byte(fs: object, key: str) -> None:
    raw = bytearray(fs.cat_file(key))  # type: ignore[attr-defined]
    raw[len(raw) // 2] ^= 0xFF
    fs.pipe_file(key, bytes(raw))  # type: ignore[attr-defined]


@pytest.fixture
def sidecar(s3: S3Server, loc: Location, tmp_path: Path) -> Iterator[subprocess.Popen[str]]:  # noqa: F811
    env = helper_env(s3, loc, tmp_path / "run", TAU_SYNC_INTERVAL="0.05")
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "taugrid.podhelper", "sync-checkpoints"],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    yield proc
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    assert proc.stderr is not None
    proc.stderr.close()


def test_the_sidecar_uploads_only_committed_checkpoints_then_the_outputs(
    s3: S3Server,  # noqa: F811
    loc: Location,
    tmp_path: Path,
    sidecar: subprocess.Popen[str],
) -> None:
    run_dir = tmp_path / "run"
    env = {**os.environ, "TAU_CHECKPOINT_DIR": str(run_dir / "checkpoints")}
    env["TAU_CHECKPOINT_KEEP"] = "100"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, "6"], env=env)
    store, fs = reader(loc), s3.fs()
    seen: set[int] = set()
    deadline = time.monotonic() + 60
    while len(seen) < 6 and time.monotonic() < deadline:
        keys = fs.find(loc.checkpoints(RUN))
        assert not [k for k in keys if "/.tmp-" in k], keys  # never a temporary directory
        for c in store.checkpoints(RUN, full=True):
            # A manifest in the bucket means every file is there, whole: it went last.
            assert c.verified or c.problem == f"missing manifest {MANIFEST}", c
            if c.verified:
                seen.add(c.step)
        time.sleep(0.02)
    assert writer.wait(timeout=60) == 0
    assert seen == {1, 2, 3, 4, 5, 6}
    local = {p.name: p for p in (run_dir / "checkpoints").iterdir()}
    for c in store.checkpoints(RUN, full=True):
        opened = store.open_checkpoint_file(RUN, c.step, "opt/m.bin")
        assert b"".join(opened.chunks()) == (local[c.path.name] / "opt" / "m.bin").read_bytes()

    outputs = run_dir / "outputs"
    (outputs / "sub").mkdir(parents=True)
    (outputs / "metrics.csv").write_text("step,loss\n1,0.5\n")
    (outputs / "sub" / "model.bin").write_bytes(b"\x00" * 5000)
    (outputs / "passwd").symlink_to("/etc/passwd")  # a link is never followed
    assert store.outputs(RUN) == []  # outputs go at the end
    sidecar.send_signal(signal.SIGTERM)
    assert sidecar.wait(timeout=60) == 0
    assert sidecar.stderr is not None
    log = sidecar.stderr.read()
    assert "tau: outputs uploaded (2 files)" in log, log
    assert store.outputs(RUN) == [("metrics.csv", 16), ("sub/model.bin", 5000)]
    assert b"".join(store.open_output(RUN, "metrics.csv").chunks()) == b"step,loss\n1,0.5\n"
    for bad in ("passwd", "../team/b", "sub", "nope.txt", "sub//model.bin"):
        with pytest.raises(NotFound):
            store.open_output(RUN, bad)


def test_pruned_replaced_and_unreadable_checkpoints(
    s3: S3Server,  # noqa: F811
    loc: Location,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("TAU_CHECKPOINT_KEEP", "2")
    root = tmp_path / "checkpoints"
    sync = CheckpointSync(s3.fs(), loc, RUN, root)
    store = reader(loc)
    for step in (1, 2, 3, 4):
        write_local(root, [step])
        sync.sync_once()
    # What the SDK pruned (keep: 2) after it went up leaves the bucket too.
    assert [c.step for c in store.checkpoints(RUN, full=True) if c.verified] == [4, 3]
    assert sync.sync_once() == []  # each goes once
    # A step written again (a restarted attempt) replaces the one in the bucket.
    again = write_local(root, [4])[4]
    assert sync.sync_once() == ["step-0000000004"]
    assert b"".join(store.open_checkpoint_file(RUN, 4, "w.bin").chunks()) == again
    # A checkpoint whose file is a link is not uploaded, and holds back no other one.
    write_local(root, [5, 6])
    link = root / "step-0000000005" / "w.bin"
    link.unlink()
    link.symlink_to(root / "step-0000000006" / "w.bin")
    assert sync.sync_once() == ["step-0000000006"] and sync.failed == 1
    assert "uploading checkpoint step-0000000005" in capsys.readouterr().err
    # 3 and 4 were pruned by the SDK when 5 and 6 came: gone from the bucket as well.
    assert [(c.step, c.verified) for c in store.checkpoints(RUN, full=True)] == [(6, True)]


def test_the_resume_point_is_chosen_as_locally_and_fetch_resume_downloads_it(
    s3: S3Server,  # noqa: F811
    loc: Location,
    tmp_path: Path,
) -> None:
    root = tmp_path / "local"
    data = write_local(root, [100, 200, 300])
    fs = s3.fs()
    CheckpointSync(fs, loc, RUN, root).sync_once()
    # Odd things in the bucket are no checkpoints: a non-canonical name, a temporary one.
    fs.pipe_file(f"{loc.checkpoints(RUN)}/step-12/{MANIFEST}", b"{}")
    fs.pipe_file(f"{loc.checkpoints(RUN)}/.tmp-step-0000000400-1-x/{MANIFEST}", b"{}")
    store = reader(loc)
    assert [c.step for c in store.checkpoints(RUN)] == [300, 200, 100]

    # Bit rot in the newest: same size, so only the full check sees it.
    flip_a_byte(fs, f"{loc.checkpoints(RUN)}/step-0000000300/w.bin")
    flip_a_byte_local = bytearray((root / "step-0000000300" / "w.bin").read_bytes())
    flip_a_byte_local[len(flip_a_byte_local) // 2] ^= 0xFF
    (root / "step-0000000300" / "w.bin").write_bytes(bytes(flip_a_byte_local))
    assert all(c.verified for c in store.checkpoints(RUN, full=False))
    best, skipped = store.resume_point(RUN)
    assert best is not None and best.step == 200
    assert [(s.step, s.problem) for s in skipped] == [(300, "sha256 mismatch of file w.bin")]
    # The same rules as the local store: the same answer from the same checkpoints.
    local_best, local_skipped = newest_verified(root)
    assert local_best is not None and local_best.step == best.step
    assert [(s.step, s.problem) for s in local_skipped] == [(s.step, s.problem) for s in skipped]

    # A hardware fault after step 100 was written: the newer ones are skipped unhashed.
    t100 = next(c.time for c in store.checkpoints(RUN) if c.step == 100)
    assert t100 is not None
    best, skipped = store.resume_point(RUN, fault_at=t100 + 0.001)
    assert best is not None and best.step == 100
    assert [s.step for s in skipped] == [300, 200]
    assert all("after the hardware fault" in (s.problem or "") for s in skipped)

    # The pod's init container fetches exactly the chosen one, verified, into place.
    run_dir = tmp_path / "pod"
    env = helper_env(s3, loc, run_dir, TAU_RESUME_STEP="step-0000000200")
    done = helper("fetch-resume", env)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "tau: checkpoint step-0000000200 fetched (1 files)\n"
    fetched = run_dir / "checkpoints"
    assert sorted(p.name for p in fetched.iterdir()) == ["step-0000000200"]
    assert verify(fetched / "step-0000000200") is None
    assert (fetched / "step-0000000200" / "w.bin").read_bytes() == data[200]
    local_manifest = (root / "step-0000000200" / MANIFEST).read_bytes()
    assert (fetched / "step-0000000200" / MANIFEST).read_bytes() == local_manifest

    # The corrupted one is refused, in one line, and leaves nothing behind.
    env["TAU_RESUME_STEP"] = "step-0000000300"
    refused = helper("fetch-resume", env)
    assert refused.returncode == 1
    assert refused.stderr == "tau: checkpoint step-0000000300: sha256 mismatch of file w.bin\n"
    assert sorted(p.name for p in fetched.iterdir()) == ["step-0000000200"]

    with pytest.raises(NotFound):
        store.open_checkpoint_file(RUN, 250, "w.bin")
    with pytest.raises(NotFound):
        store.open_checkpoint_file(RUN, 200, "../step-0000000300/w.bin")
    assert store.checkpoints("other-run12") == [] and store.outputs("other-run12") == []


def test_bad_storage_is_said_in_one_line_without_secrets(
    s3: S3Server,  # noqa: F811
    loc: Location,
    tmp_path: Path,
) -> None:
    def one_line(message: str) -> str:
        assert "\n" not in message.strip() and SECRET not in message and KEY_ID not in message
        return message

    with pytest.raises(StorageError) as info:
        reader(Location(f"s3://tau-missing-{os.getpid()}", s3.endpoint)).checkpoints(RUN)
    assert one_line(info.value.message).endswith(": the bucket does not exist")
    with pytest.raises(StorageError) as info:
        open_fs(Location("gs://bucket"))
    assert (
        one_line(info.value.message)
        == "storage url must be s3://bucket[/prefix], got 'gs://bucket'"
    )
    with pytest.raises(StorageError) as info:
        reader(Location(loc.url, "http://127.0.0.1:9")).outputs(RUN)
    assert "cannot reach the storage endpoint" in one_line(info.value.message)

    s3.require_auth(True)
    try:
        with pytest.raises(StorageError) as info:
            reader(loc).resume_point(RUN)
        message = one_line(info.value.message)
        assert message.startswith(f"listing the checkpoints at {loc.url} (endpoint ")
        assert "access denied" in message
        env = helper_env(s3, loc, tmp_path / "pod", TAU_RESUME_STEP="step-0000000001")
        done = helper("fetch-resume", env)
    finally:
        s3.require_auth(False)
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert (
        line.startswith("tau: fetching checkpoint step-0000000001 at ") and "access denied" in line
    )
    one_line(done.stderr)
