"""What a run's record says about its code and Python, captured by ``tau run`` at submit.

Two cheap looks, each bounded by a timeout and ``None`` when it cannot be answered:

- :func:`capture_git`: the commit, branch, whether the workdir differs from the commit
  (tracked changes or untracked files), the untracked files (git's own list, capped) and
  ``git diff HEAD`` of the workdir (capped at 1 MiB). Only the workdir is looked at, since
  only the workdir is in the run's snapshot. ``None`` outside a git repository, without
  git, or before the first commit.
- :func:`capture_python_env`: the interpreter the workload will get (the first
  ``python3``/``python`` on PATH) and its installed distributions. When that is the
  interpreter and environment running ``tau`` itself, it is read in-process; otherwise the
  interpreter is asked with a tiny script.

No environment variable is recorded (secrets live there): PATH is read to find the
interpreter, which then runs with the environment a workload gets. Nothing is cached on
disk. At most two git processes and one Python process run, in threads that
overlap building and sending the snapshot (:class:`Capture`). Measured on a 2-core VM
(medians): git 12 ms (status, plus diff when dirty); Python 9.5 ms in-process (76
distributions); another interpreter costs its own start-up, 150-190 ms for the pyenv
Python here (its site-packages import certifi: 100 ms of that). Next to a 40 ms
snapshot, ``tau run`` waits 30 ms more when the workload's Python is tau's own
environment and 165 ms more when it is another one.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import selectors
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from taugrid.domain.workload_env import submitter_env

GIT_TIMEOUT_S = 5.0
PYTHON_TIMEOUT_S = 10.0
MAX_DIFF_BYTES = 1 << 20
MAX_UNTRACKED = 1000

# git reads no prompts, takes no optional locks (``status`` would otherwise refresh and
# write the index of the user's repository) and prints in a fixed language.
_GIT_ENV_OVERRIDES = {"GIT_OPTIONAL_LOCKS": "0", "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}
_GIT = ["git", "-c", "core.quotepath=off", "-c", "color.ui=never"]


def capture_code(workdir: Path, *, timeout: float = GIT_TIMEOUT_S) -> dict[str, Any]:
    """The ``code`` field of a submit request (``snapshot_digest`` is the server's)."""
    return {"git": capture_git(workdir, timeout=timeout)}


def capture_git(workdir: Path, *, timeout: float = GIT_TIMEOUT_S) -> dict[str, Any] | None:
    env = {**os.environ, **_GIT_ENV_OVERRIDES}
    status = _run_capped(
        [
            *_GIT,
            "status",
            "--porcelain=v2",
            "--branch",
            "-z",
            "--untracked-files=normal",
            "--ignore-submodules=dirty",
            "--",
            ".",
        ],
        workdir,
        env,
        cap=8 << 20,
        timeout=timeout,
    )
    if status is None:
        return None
    out, _ = status
    commit, branch, changed, untracked = _parse_status(out)
    if commit is None:
        return None
    diff_text, truncated = "", False
    if changed:
        diff = _run_capped(
            [
                *_GIT,
                "diff",
                "--no-ext-diff",
                "--no-textconv",
                "--src-prefix=a/",
                "--dst-prefix=b/",
                "HEAD",
                "--",
                ".",
            ],
            workdir,
            env,
            cap=MAX_DIFF_BYTES,
            timeout=timeout,
        )
        if diff is not None:
            raw, truncated = diff
            if truncated:
                cut = raw.rfind(b"\n")  # never end inside a line
                raw = raw[: cut + 1] if cut >= 0 else raw
            diff_text = raw.decode("utf-8", errors="replace")
    return {
        "commit": commit,
        "branch": branch,
        "dirty": changed or bool(untracked),
        "diff": diff_text or None,
        "diff_truncated": truncated,
        "untracked": untracked[:MAX_UNTRACKED],
    }


def _parse_status(out: bytes) -> tuple[str | None, str | None, bool, list[str]]:
    """(commit, branch, tracked changes?, untracked paths) from ``status --porcelain=v2 -z``."""
    commit: str | None = None
    branch: str | None = None
    changed = False
    untracked: list[str] = []
    entries = out.split(b"\0")
    i = 0
    while i < len(entries):
        entry = entries[i].decode("utf-8", errors="replace")
        i += 1
        if entry.startswith("# branch.oid "):
            oid = entry.split(" ", 2)[2]
            commit = None if oid == "(initial)" else oid
        elif entry.startswith("# branch.head "):
            head = entry.split(" ", 2)[2]
            branch = None if head == "(detached)" else head
        elif entry.startswith("? "):
            if len(untracked) < MAX_UNTRACKED:
                untracked.append(entry[2:])
        elif entry[:2] in ("1 ", "u "):
            changed = True
        elif entry.startswith("2 "):
            changed = True
            i += 1  # a rename's original path is the next NUL-separated field
    return commit, branch, changed, untracked


def _run_capped(
    argv: list[str], cwd: Path, env: dict[str, str] | None, *, cap: int, timeout: float
) -> tuple[bytes, bool] | None:
    """stdout of a successful command, at most ``cap`` bytes, and whether it was cut.

    ``None`` when the program is missing, fails, or outlives ``timeout``. A command cut
    at ``cap`` is killed rather than read to the end.
    """
    try:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
    except OSError:
        return None
    assert proc.stdout is not None
    chunks: list[bytes] = []
    size = 0
    truncated = False
    deadline = time.monotonic() + timeout
    try:
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    return None  # timed out
                data = os.read(proc.stdout.fileno(), 65536)
                if not data:
                    break
                chunks.append(data)
                size += len(data)
                if size > cap:
                    truncated = True
                    break
        if truncated:
            proc.kill()
            proc.wait()
            return b"".join(chunks)[:cap], True
        rc = proc.wait(max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
    return (b"".join(chunks), False) if rc == 0 else None


# -- Python environment ------------------------------------------------------------------

# Runs in the workload's interpreter (any Python 3.6+, stdlib only) as ``python -c``, and
# in-process through exec when that interpreter is ours. It reads the Name and Version
# headers of each *.dist-info / *.egg-info on sys.path, in path order (first one wins, as
# in importlib.metadata), without importing importlib.metadata: that import and its email
# parser cost ~100 ms here, the scan ~2 ms.
_PROBE = r"""
import json, os, platform, sys


def distributions(paths):
    found = {}
    for entry in paths:
        if not entry or not os.path.isdir(entry):
            continue
        try:
            names = sorted(os.listdir(entry))
        except OSError:
            continue
        for name in names:
            if name.endswith(".dist-info"):
                meta = os.path.join(entry, name, "METADATA")
            elif name.endswith(".egg-info"):
                meta = os.path.join(entry, name)
                if os.path.isdir(meta):
                    meta = os.path.join(meta, "PKG-INFO")
            else:
                continue
            fields = {}
            try:
                with open(meta, encoding="utf-8", errors="replace") as f:
                    for line in f:
                        if not line.strip():
                            break
                        key, sep, value = line.partition(":")
                        if sep and key in ("Name", "Version"):
                            fields.setdefault(key, value.strip())
                        if len(fields) == 2:
                            break
            except OSError:
                continue
            if fields.get("Name") and "Version" in fields:
                found.setdefault(fields["Name"], fields["Version"])
    return found


if __name__ == "__main__":
    print(json.dumps({"version": platform.python_version(),
                      "implementation": platform.python_implementation(),
                      "executable": sys.executable,
                      "packages": distributions(sys.path)}))
"""


def workload_python(path: str | None = None) -> str | None:
    """The interpreter a workload's ``python3`` (else ``python``) resolves to on PATH."""
    search = os.environ.get("PATH", os.defpath) if path is None else path
    return shutil.which("python3", path=search) or shutil.which("python", path=search)


def capture_python_env(
    path: str | None = None, *, timeout: float = PYTHON_TIMEOUT_S
) -> dict[str, Any] | None:
    """The ``python_env`` field of a submit request; ``path`` is the workload's PATH."""
    exe = workload_python(path)
    if exe is None:
        return None
    if _is_this_environment(exe):
        return _this_environment(exe)
    # The environment the workload gets from this shell (PYTHONPATH, VIRTUAL_ENV, HOME...).
    environ = submitter_env(os.environ)
    probe = _run_capped([exe, "-c", _PROBE], Path.cwd(), environ, cap=8 << 20, timeout=timeout)
    if probe is None or probe[1]:
        return None
    try:
        data = json.loads(probe[0].decode("utf-8", errors="replace").strip().splitlines()[-1])
        return {
            "version": str(data["version"]),
            "implementation": str(data["implementation"]),
            "executable": str(data["executable"] or exe),
            "packages": _normalized({str(k): str(v) for k, v in data["packages"].items()}),
        }
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return None


def _venv_root(exe: str) -> Path | None:
    """The virtual environment an interpreter path belongs to (as Python decides: a
    ``pyvenv.cfg`` next to, or one above, the executable as invoked), else ``None``."""
    bindir = Path(exe).absolute().parent
    for d in (bindir, bindir.parent):
        if (d / "pyvenv.cfg").is_file():
            return d.resolve()
    return None


def _is_this_environment(exe: str) -> bool:
    """Same binary and same environment as this process: a venv shares its base's binary
    (``pipx`` installs do too), so the binary alone would say yes for the wrong packages."""
    if os.path.realpath(exe) != os.path.realpath(sys.executable):
        return False
    ours = Path(sys.prefix).resolve() if sys.prefix != sys.base_prefix else None
    return _venv_root(exe) == ours


def _this_environment(exe: str) -> dict[str, Any]:
    import platform

    probe: dict[str, Any] = {"__name__": "taugrid_python_probe"}
    exec(compile(_PROBE, "<tau python probe>", "exec"), probe)
    return {
        "version": platform.python_version(),
        "implementation": platform.python_implementation(),
        "executable": exe,
        "packages": _normalized(probe["distributions"](sys.path)),
    }


def _normalized(pkgs: dict[str, str]) -> dict[str, str]:
    """PEP 503 names (``Foo_Bar`` -> ``foo-bar``), sorted, first seen wins."""
    out: dict[str, str] = {}
    for name, version in pkgs.items():
        out.setdefault(re.sub(r"[-_.]+", "-", name).lower(), version)
    return dict(sorted(out.items()))


class Capture:
    """Both looks in background threads, so they overlap building and sending the snapshot.

    ``result()`` gives the submit request's ``(code, python_env)``; a look that failed
    in any way gives ``None`` there rather than failing the submit.
    """

    def __init__(self, workdir: Path, path: str | None = None) -> None:
        import threading

        self._code: dict[str, Any] | None = None
        self._python: dict[str, Any] | None = None

        def code() -> None:
            with contextlib.suppress(Exception):  # a record is never worth a failed submit
                self._code = capture_code(workdir)

        def python() -> None:
            with contextlib.suppress(Exception):
                self._python = capture_python_env(path)

        self._threads = [
            threading.Thread(target=code, name="tau-git", daemon=True),
            threading.Thread(target=python, name="tau-python", daemon=True),
        ]
        for t in self._threads:
            t.start()

    def result(self) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        for t in self._threads:
            t.join(GIT_TIMEOUT_S + PYTHON_TIMEOUT_S)
        return self._code, self._python
