"""The real supervisor meeting faults: its own death, OOM, a full disk, a disk limit, and
secrets in the workload's output."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_exec_supervisor import ENV, wait_for, wait_phase

from servicecheck import require_service
from taugrid.executors.local.files import write_json_atomic
from taugrid.executors.local.oomwatch import KMSG, memory_cgroup_counter
from taugrid.executors.local.process import pid_alive, reap_supervisors, start_supervisor

ROOT = os.geteuid() == 0


def launch(run_dir: Path, command: list[str] | str, **fields: Any) -> Path:
    """An attempt laid out as the executor does: runs/<id>/attempts/0 and workdir/."""
    attempt = run_dir / "attempts" / "0"
    attempt.mkdir(parents=True)
    work = run_dir / "workdir"
    work.mkdir(exist_ok=True)
    data: dict[str, Any] = {
        "command": command,
        "setup": None,
        "cwd": str(work),
        "env": {**ENV, "TAU_RUN_ID": "r-faults", "TAU_ATTEMPT": "0"},
        "stop_grace_s": 0.5,
        "timeout_s": None,
        "outputs": [],
        "output_dir": str(run_dir / "outputs"),
        "notify": None,
    }
    data.update(fields)
    write_json_atomic(attempt / "launch.json", data)
    return attempt


def finish(attempt: Path, timeout: float = 15.0) -> dict[str, Any]:
    status = wait_phase(attempt, "exited", timeout)
    wait_for(lambda: not pid_alive(status["supervisor_pid"]), what="supervisor exit")
    reap_supervisors()
    return status


def log(attempt: Path) -> str:
    return (attempt / "output.log").read_text(errors="replace")


def test_the_workload_dies_with_its_supervisor(tmp_path: Path) -> None:
    attempt = launch(tmp_path / "run", ["sleep", "60"])
    spid = start_supervisor(attempt)
    main = wait_phase(attempt, "running")["pid"]
    os.kill(spid, signal.SIGKILL)
    wait_for(lambda: not pid_alive(spid), what="supervisor gone")
    reap_supervisors()
    try:
        # Without PR_SET_PDEATHSIG the workload ran on for its whole minute, owned by no one.
        wait_for(lambda: not pid_alive(main), 3.0, "the workload to die with its supervisor")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(main, signal.SIGKILL)


def test_kill_9_of_the_workload_is_a_signal_not_an_oom(tmp_path: Path) -> None:
    attempt = launch(tmp_path / "run", ["sleep", "60"])
    start_supervisor(attempt)
    os.kill(wait_phase(attempt, "running")["pid"], signal.SIGKILL)
    status = finish(attempt)
    assert (status["outcome"], status["signal"], status["exit_code"]) == ("failed", 9, 137)
    assert status["oom"] is not True
    if os.access(KMSG, os.R_OK):  # the kernel log is a source here: it knows it was no OOM
        assert status["oom"] is False


@contextlib.contextmanager
def memory_cgroup(limit: int) -> Iterator[Path]:
    """A child of this process's memory cgroup with a small limit (root, cgroup v1 or a
    v2 cgroup with the memory controller delegated); skipped where it cannot be made."""
    counter = memory_cgroup_counter(os.getpid())
    require_service(ROOT and counter is not None, "a memory cgroup can be created (root)")
    assert counter is not None
    child = Path(counter).parent / f"tau-test-oom-{os.getpid()}"
    try:
        child.mkdir()
    except OSError as exc:
        require_service(False, f"cannot create a memory cgroup: {exc}")
    try:
        limit_file = child / "memory.limit_in_bytes"
        if not limit_file.exists():
            limit_file = child / "memory.max"
        require_service(limit_file.exists(), "the memory controller is not enabled there")
        limit_file.write_text(str(limit))
        with contextlib.suppress(OSError):
            (child / "memory.memsw.limit_in_bytes").write_text(str(limit))
        with contextlib.suppress(OSError):
            (child / "memory.swap.max").write_text("0")
        yield child
    finally:
        deadline = time.monotonic() + 5
        while True:
            try:
                child.rmdir()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)


# Joins the cgroup, then touches memory until the kernel's OOM killer ends it.
HOG = (
    "import os, sys\n"
    "open(os.path.join(sys.argv[1], 'cgroup.procs'), 'w').write(str(os.getpid()))\n"
    "hoard = []\n"
    "while True:\n"
    "    hoard.append(bytearray(1 << 20))\n"
)


def test_a_real_oom_kill_is_reported_as_oom(tmp_path: Path) -> None:
    require_service(os.access(KMSG, os.R_OK), "the kernel log (/dev/kmsg) is readable (root)")
    with memory_cgroup(48 << 20) as cg:
        attempt = launch(tmp_path / "run", [sys.executable, "-c", HOG, str(cg)])
        start_supervisor(attempt)
        status = finish(attempt, timeout=30)
    assert (status["outcome"], status["signal"]) == ("failed", 9)
    assert status["oom"] is True


def test_a_shells_child_killed_by_oom_is_reported_as_oom(tmp_path: Path) -> None:
    """``command: python hog.py`` runs under /bin/sh, which exits 137 without a signal."""
    require_service(os.access(KMSG, os.R_OK), "the kernel log (/dev/kmsg) is readable (root)")
    with memory_cgroup(48 << 20) as cg:
        run_dir = tmp_path / "run"
        (run_dir / "workdir").mkdir(parents=True)
        (run_dir / "workdir" / "hog.py").write_text(HOG)
        attempt = launch(run_dir, f"{sys.executable} hog.py {cg}; exit $?")
        start_supervisor(attempt)
        status = finish(attempt, timeout=30)
    assert status["outcome"] == "failed" and status["exit_code"] == 137
    assert status["oom"] is True


WRITE_5M = (
    "import os, time\n"
    "with open(os.path.join(os.environ['OUT'], 'blob'), 'wb') as f:\n"
    "    f.write(os.urandom(5 << 20))\n"
    "print('written', flush=True)\n"
    "time.sleep(60)\n"
)


def test_a_run_over_its_disk_limit_is_stopped_with_the_numbers(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    attempt = launch(
        run_dir,
        [sys.executable, "-c", WRITE_5M],
        disk_limit_bytes=1 << 20,
        env={**ENV, "OUT": str(run_dir / "outputs")},
    )
    began = time.monotonic()
    start_supervisor(attempt)
    status = finish(attempt)
    assert time.monotonic() - began < 10
    assert status["outcome"] == "disk_limit"
    assert status["signal"] == signal.SIGTERM
    assert status["disk_limit_bytes"] == 1 << 20 and status["disk_used_bytes"] >= 5 << 20
    assert "over its disk limit of 1.0 MiB (1048576 bytes)" in status["detail"]
    assert "over its disk limit" in log(attempt)
    assert not (attempt / "disk.reserve").exists()  # given back at the end


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "small"
    mnt.mkdir()
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
        check=False,
    )
    require_service(proc.returncode == 0, f"cannot mount a tmpfs: {proc.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


FILL = (
    "import os, sys\n"
    "print('filling', flush=True)\n"
    "with open(os.path.join(os.environ['OUT'], 'fill'), 'wb') as f:\n"
    "    while True:\n"
    "        f.write(b'x' * 65536)\n"
    "        f.flush()\n"
)


def test_a_workload_that_fills_the_disk_ends_disk_full_with_a_log(small_disk: Path) -> None:
    run_dir = small_disk / "runs" / "r-faults"
    attempt = launch(
        run_dir,
        [sys.executable, "-c", FILL],
        env={**ENV, "OUT": str(run_dir / "outputs")},
    )
    (run_dir / "outputs").mkdir()
    start_supervisor(attempt)
    status = finish(attempt)
    assert status["outcome"] == "disk_full", status
    assert status["exit_code"] == 1  # the workload's own ENOSPC error
    assert status["detail"].startswith("the disk holding TAU_HOME is full (")
    text = log(attempt)
    assert "the disk holding TAU_HOME is full" in text


SECRET = "s3cr3t-Value-42"
PRINTS_SECRET = (
    "import os, sys, time\n"
    "v = os.environ['API_TOKEN']\n"
    "print('whole', v, flush=True)\n"
    "sys.stdout.write('split ' + v[:6]); sys.stdout.flush(); time.sleep(0.3)\n"
    "sys.stdout.write(v[6:] + ' end\\n'); sys.stdout.flush()\n"
    "print('err', v, file=sys.stderr, flush=True)\n"
    "print(os.readlink('/proc/self/fd/1'), flush=True)\n"
)


def test_secret_values_are_masked_in_the_log(tmp_path: Path) -> None:
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET + "\n")
    attempt = launch(
        tmp_path / "run",
        [sys.executable, "-c", PRINTS_SECRET],
        secret_files={"API_TOKEN": str(secret_file)},
    )
    start_supervisor(attempt)
    status = finish(attempt)
    assert status["outcome"] == "succeeded"
    text = log(attempt)
    assert "whole ***\n" in text and "split *** end\n" in text and "err ***\n" in text
    assert "pipe:" in text  # the workload writes into the supervisor's masking pipe
    for path in (tmp_path / "run").rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path


def test_without_secrets_the_workload_writes_to_the_log_file_itself(tmp_path: Path) -> None:
    attempt = launch(
        tmp_path / "run", [sys.executable, "-c", "import os; print(os.readlink('/proc/self/fd/1'))"]
    )
    start_supervisor(attempt)
    assert finish(attempt)["outcome"] == "succeeded"
    assert log(attempt).strip() == str(attempt / "output.log")


def test_masking_never_blocks_a_chatty_workload(tmp_path: Path) -> None:
    """20 MB of output through the pipe, the secret in the middle of it, all of it kept."""
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET)
    code = (
        "import os, sys\n"
        "line = b'y' * 1023 + b'\\n'\n"
        "for i in range(20000):\n"
        "    sys.stdout.buffer.write(line)\n"
        "    if i == 10000: sys.stdout.buffer.write(os.environb[b'API_TOKEN'] + b'\\n')\n"
    )
    attempt = launch(
        tmp_path / "run",
        [sys.executable, "-c", code],
        secret_files={"API_TOKEN": str(secret_file)},
    )
    start_supervisor(attempt)
    assert finish(attempt, timeout=60)["outcome"] == "succeeded"
    data = (attempt / "output.log").read_bytes()
    assert len(data) == 20000 * 1024 + 4 and data.count(b"***\n") == 1
    assert SECRET.encode() not in data
