"""What a sandboxed workload may see, decided by the executor at launch; the start-up probe.

:class:`SandboxPolicy` is the server's setting (bwrap, the uid range, what to hide);
:meth:`SandboxPolicy.describe` turns it and one attempt's paths and environment into
the plain description the supervisor runs (``sandbox.bwrap_argv``) and launch.json
records. The choices are made by the pure functions in :mod:`sandbox`; this module only
looks at the filesystem (which interpreters the workload's paths lead to, which files
exist) and hands the run's directories to its uid. See docs/isolation.md.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from taugrid.executors.local import sandbox

PROBE_TIMEOUT_S = 20.0
PYTHON_NAMES = ("python", "python3")


@dataclass(frozen=True)
class SandboxPolicy:
    bwrap: str  # absolute path of bubblewrap
    private: tuple[str, ...]  # never visible: TAU_HOME
    hidden: tuple[str, ...] = ()  # hidden unless a workload's path needs a part: HOME
    conceal: tuple[str, ...] = ()  # the server's own files, hidden wherever they are
    binds: tuple[str, ...] = ()  # what the platform shows every workload (read-only)
    uids: tuple[int, int] | None = None  # one uid per run from this range (server is root)
    setpriv: str | None = None  # drops to that uid inside the sandbox
    scratch: tuple[str, ...] = field(default=sandbox.SCRATCH_DIRS)

    def describe(
        self,
        run_id: str,
        *,
        writable: Sequence[Path],
        chdir: Path,
        env: Mapping[str, str],
        command: Sequence[str] | str,
    ) -> dict[str, Any]:
        """The sandbox of one attempt: JSON for launch.json (``sandbox.bwrap_argv``)."""
        candidates = sandbox.candidate_paths(env, command) + [
            p for b in self.binds if (p := sandbox.clean(b))
        ]
        candidates += interpreter_paths(candidates)
        expose = sandbox.select_exposures(
            candidates, [*self.scratch, *self.hidden], list(self.private)
        )
        uid = sandbox.workload_uid(run_id, *self.uids) if self.uids else None
        return {
            "bwrap": self.bwrap,
            "uid": uid,
            "setpriv": self.setpriv if uid is not None else None,
            "userns": self.uids is None and os.geteuid() != 0,
            "devices": sorted(glob.glob("/dev/nvidia*")),
            # A mount point missing under the read-only root could not be made.
            "scratch": [p for p in self.scratch if os.path.isdir(p)],
            "hidden": [p for p in self.hidden if os.path.isdir(p)],
            "expose": [p for p in expose if os.path.exists(p)],  # a dangling link: no
            "private": list(self.private),
            "conceal": [[p, os.path.isdir(p)] for p in self.conceal if os.path.exists(p)],
            "writable": [str(p) for p in writable],
            "chdir": str(chdir),
        }


def interpreter_paths(candidates: Sequence[str]) -> list[str]:
    """Installations the candidates lead to: for each python in a candidate directory
    (or a candidate that is one), the real prefix behind its symlinks and the base named
    by a venv's ``pyvenv.cfg``; for any other absolute command, its real file."""
    found: list[str] = []
    for path in candidates:
        if os.path.isdir(path):
            pythons = [os.path.join(path, n) for n in PYTHON_NAMES]
            cfgs = [os.path.join(path, "pyvenv.cfg"), os.path.join(path, "..", "pyvenv.cfg")]
        elif os.path.isfile(path):
            pythons = [path]
            cfgs = [os.path.join(os.path.dirname(path), "..", "pyvenv.cfg")]
        else:
            continue
        for exe in pythons:
            if not os.path.isfile(exe):
                continue
            real = os.path.realpath(exe)
            if os.path.basename(real).startswith("python"):
                found.append(sandbox.python_prefix(real))
            elif real != os.path.abspath(exe):
                found.append(real)
        for cfg in cfgs:
            home = _venv_home(cfg)
            if home:
                found.append(sandbox.venv_home_prefix(os.path.realpath(home)))
    return [p for p in dict.fromkeys(found) if p]


def _venv_home(cfg: str) -> str | None:
    try:
        with open(cfg, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, sep, value = line.partition("=")
                if sep and key.strip() == "home" and value.strip().startswith("/"):
                    return value.strip()
    except OSError:
        pass
    return None


# -- the run's files, handed to its uid ------------------------------------------------------
def make_private(root: Path, uid: int | None = None) -> None:
    """Strip group and other bits from everything under ``root`` (a snapshot keeps its
    archive's 0644/0755) and, with ``uid``, give it to that uid and gid. Never follows a
    link: a workload's earlier attempt may have planted some (links are chowned as links).
    """
    _fix(str(root), uid)
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            _fix(os.path.join(top, name), uid)


def _fix(path: str, uid: int | None) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if uid is not None and (st.st_uid != uid or st.st_gid != uid):
        os.chown(path, uid, uid, follow_symlinks=False)
    if not os.path.islink(path) and st.st_mode & 0o077:
        os.chmod(path, st.st_mode & 0o7700)


def hand_over(desc: Mapping[str, Any], files: Sequence[Path]) -> None:
    """Make the sandbox's writable paths the workload's: ``files`` are created empty
    (bound in one by one, their directory stays invisible), everything is chowned to the
    run's uid when there is one, and nothing keeps group or other bits."""
    uid = desc.get("uid")
    for path in files:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            if uid is not None:
                os.fchown(fd, uid, uid)
        finally:
            os.close(fd)
    for path in desc.get("writable") or ():
        if os.path.isdir(path) and not os.path.islink(path):
            make_private(Path(path), uid)


# -- the start-up probe --------------------------------------------------------------------
def find_tool(name: str) -> str | None:
    """``name`` as given when it is a path to an executable, else looked up on PATH."""
    if "/" in name:
        return os.path.abspath(name) if os.access(name, os.X_OK) else None
    return shutil.which(name)


def probe(policy: SandboxPolicy, home: Path) -> str | None:
    """Run one trivial workload in a sandbox made exactly as for a run (same flags, same
    uid drop): it must write in its own directory and must not see a file in TAU_HOME.
    None when it works; otherwise what went wrong, in words."""
    root = Path(tempfile.mkdtemp(prefix=".sandbox-probe-", dir=home))
    try:
        workdir, secret = root / "workdir", root / "secret"
        workdir.mkdir()
        secret.write_text("probe\n")
        desc = policy.describe(
            "sandbox-probe", writable=[workdir], chdir=workdir, env={}, command=["/bin/sh"]
        )
        hand_over(desc, [])
        argv = ["/bin/sh", "-c", 'test ! -e "$1" && : > ok', "sh", str(secret)]
        try:
            done = subprocess.run(
                sandbox.bwrap_argv(desc, argv),
                cwd=workdir,
                env={"PATH": "/usr/bin:/bin"},
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=PROBE_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"{policy.bwrap} could not run a sandbox: {exc}"
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        why = f": {said[-1]}" if said else ""
        if done.returncode != 0:
            return f"{policy.bwrap} could not run a sandbox (exit {done.returncode}){why}"
        ok = workdir / "ok"
        if not ok.exists():
            return "a sandboxed workload could still see TAU_HOME"
        uid = desc.get("uid")
        if uid is not None and ok.stat().st_uid != uid:
            return f"the sandboxed workload did not run as uid {uid}"
        return None
    finally:
        shutil.rmtree(root, ignore_errors=True)
