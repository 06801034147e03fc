"""The workload sandbox: bubblewrap's command line from a plain description. Pure.

The executor decides what a workload may see and writes it into ``launch.json`` (key
``"sandbox"``); the supervisor turns that description into a ``bwrap`` command line with
:func:`bwrap_argv`. Both sides use only this module's pure functions, so the same input
always gives the same sandbox, and ``launch.json`` says exactly what is visible. Stdlib
only and cheap to import: the supervisor imports it on the submit-to-running path.

The description (every path absolute; lists in the order they are mounted)::

    bwrap        the bubblewrap binary
    uid          the workload's uid (and gid) when the server runs as root, else null
    setpriv      setpriv (util-linux), which drops to ``uid`` inside the sandbox
    userns       true when the server is not root: bwrap then needs a user namespace
    devices      /dev nodes bound in as they are (GPUs)
    scratch      private, empty, writable tmpfs (mode 1777): /tmp, /var/tmp, /dev/shm
    hidden       empty tmpfs hiding a tree (the server user's HOME) before ``expose``
    expose       read-only binds of what the workload needs that ``hidden`` hid
    private      empty tmpfs mounted after ``expose`` (TAU_HOME): nothing may show it
    conceal      [path, is_dir] of the server's own files to hide wherever they show
    writable     read-write binds: the run's workdir, checkpoints, outputs, home, metrics
    chdir        the workload's working directory

Everything else is the host's filesystem, read-only. Mount order is the security
argument: ``private`` comes after ``expose``, so no exposed path, however chosen, can
show TAU_HOME; the run's own directories come last.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

SCRATCH_MODE = "1777"
DIR_MODE = "0755"  # directories made for mount points: the dropped uid must traverse them
SCRATCH_DIRS = ("/tmp", "/var/tmp", "/dev/shm")
# Flags of every sandbox. The network stays the host's (workloads download data).
NAMESPACE_FLAGS = (
    "--unshare-pid",
    "--unshare-ipc",
    "--die-with-parent",
    "--new-session",
    "--cap-drop",
    "ALL",
)
# Capabilities kept until setpriv drops to the run's uid (which clears them all).
ROOT_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_DAC_READ_SEARCH")
# Environment variables naming the interpreters and tools a workload runs with.
PATH_LIST_VARS = ("PATH", "PYTHONPATH", "LD_LIBRARY_PATH")
PATH_VARS = ("VIRTUAL_ENV", "CONDA_PREFIX", "CUDA_HOME")
LAST_SIGNAL = 64  # SIGRTMAX on Linux


def is_under(path: str, root: str) -> bool:
    """Whether ``path`` is ``root`` or inside it (both normalised absolute paths)."""
    if root == "/":
        return True
    return path == root or path.startswith(root + "/")


def is_strictly_under(path: str, root: str) -> bool:
    return path != root and is_under(path, root)


def ancestors(path: str) -> list[str]:
    """``/a/b/c`` -> ``["/", "/a", "/a/b"]``."""
    out = []
    while path != "/":
        path = posixpath.dirname(path)
        out.append(path)
    return out[::-1]


def clean(path: str) -> str | None:
    """The normalised absolute form of ``path``, or None for a relative or odd one."""
    if not path or not path.startswith("/") or "\0" in path:
        return None
    return posixpath.normpath(path).replace("//", "/")


# -- what a workload needs to see -----------------------------------------------------------
def candidate_paths(env: Mapping[str, str], command: Sequence[str] | str) -> list[str]:
    """Interpreter and tool paths named by the workload's environment and command line:
    every PATH, PYTHONPATH and LD_LIBRARY_PATH entry, VIRTUAL_ENV, CONDA_PREFIX,
    CUDA_HOME, and argv[0] when absolute. Relative entries are dropped."""
    raw: list[str] = []
    for var in PATH_LIST_VARS:
        raw += env.get(var, "").split(":")
    raw += [env.get(var, "") for var in PATH_VARS]
    if not isinstance(command, str) and command:
        raw.append(command[0])
    out: list[str] = []
    for entry in raw:
        path = clean(entry)
        if path is not None and path not in out:
            out.append(path)
    return out


def python_prefix(real_binary: str) -> str:
    """The installation behind an interpreter binary: ``/opt/py/bin/python3.11`` ->
    ``/opt/py`` (the standard library and shared library live there too)."""
    bindir = posixpath.dirname(real_binary)
    return posixpath.dirname(bindir) if posixpath.basename(bindir) == "bin" else bindir


def venv_home_prefix(home: str) -> str:
    """The prefix named by a venv's ``pyvenv.cfg`` ``home`` (the base interpreter's bin)."""
    home = home.rstrip("/") or "/"
    return posixpath.dirname(home) if posixpath.basename(home) == "bin" else home


def select_exposures(
    candidates: Iterable[str], hidden_roots: Sequence[str], private_roots: Sequence[str]
) -> list[str]:
    """The candidates that need a read-only bind, outermost first.

    Only paths strictly inside a hidden root need one (the rest of the host shows through
    the read-only root). A candidate inside a private root (TAU_HOME) is never bound. One
    that is a hidden root or above one would undo the hiding, so it is dropped too; one
    inside another kept candidate is shown by that one already.
    """
    keep: set[str] = set()
    for raw in candidates:
        path = clean(raw)
        if path is None or any(is_under(path, p) for p in private_roots):
            continue
        if any(is_under(root, path) for root in hidden_roots):
            continue
        if any(is_strictly_under(path, root) for root in hidden_roots):
            keep.add(path)
    return sorted(p for p in keep if not any(is_strictly_under(p, q) for q in keep))


def workload_uid(run_id: str, first: int, last: int) -> int:
    """The run's own uid in ``first..last``, derived from its id (stable across
    attempts, so a resumed run owns its files again)."""
    import hashlib  # not on the supervisor's path

    digest = hashlib.sha256(run_id.encode("utf-8")).digest()
    return first + int.from_bytes(digest[:8], "big") % (last - first + 1)


def parse_uid_range(text: str) -> tuple[int, int]:
    """``"2000000-2999999"`` -> (2000000, 2999999); ValueError saying what is wrong."""
    first_s, sep, last_s = text.strip().partition("-")
    if not sep or not first_s.strip().isdigit() or not last_s.strip().isdigit():
        raise ValueError(f"workload uids must be a range FIRST-LAST of numbers, not {text!r}")
    first, last = int(first_s), int(last_s)
    if not 1 <= first <= last <= 2**32 - 2:
        raise ValueError(
            f"workload uids {text!r}: need 1 <= FIRST <= LAST <= {2**32 - 2} (never root)"
        )
    return first, last


# -- the command line ---------------------------------------------------------------------
class _Layout:
    """The mounts so far, to know which directories exist inside the sandbox."""

    def __init__(self) -> None:
        self.mounts: list[tuple[str, str]] = []  # (path, "bind" | "tmpfs"), in order
        self.made: set[str] = set()
        self.args: list[str] = []

    def cover(self, path: str) -> tuple[str, str]:
        """The mount whose content ``path`` shows: the last one at it or above it."""
        for mount in reversed(self.mounts):
            if is_under(path, mount[0]):
                return mount
        return ("/", "bind")

    def shows_host(self, path: str) -> bool:
        """Whether ``path`` shows the host's file (a bind covers it, not a tmpfs)."""
        return self.cover(path)[1] == "bind"

    def parents(self, path: str) -> None:
        """Make the missing directories above ``path`` (inside a tmpfs) with DIR_MODE:
        bwrap would make them with its umask, which the dropped uid may not traverse."""
        for parent in ancestors(path):
            mount, kind = self.cover(parent)
            if kind == "tmpfs" and parent != mount and parent not in self.made:
                self.args += ["--perms", DIR_MODE, "--dir", parent]
                self.made.add(parent)

    def mount(self, kind: str, path: str, args: Sequence[str]) -> None:
        self.parents(path)
        self.args += args
        self.made = {d for d in self.made if not is_strictly_under(d, path)}
        self.mounts.append((path, kind))


def bwrap_argv(
    desc: Mapping[str, Any], argv: Sequence[str], status_fd: int | None = None
) -> list[str]:
    """The command that runs ``argv`` in the sandbox ``desc`` describes (see the module
    docstring). ``status_fd``: where bwrap reports the sandbox's pid and exit code."""
    lay = _Layout()
    lay.args = ["--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"]
    lay.mounts = [("/", "bind"), ("/proc", "bind"), ("/dev", "tmpfs")]
    for dev in desc.get("devices") or ():
        lay.mount("bind", dev, ["--dev-bind", dev, dev])
    for path in desc.get("scratch") or ():
        lay.mount("tmpfs", path, ["--perms", SCRATCH_MODE, "--tmpfs", path])
    for path in desc.get("hidden") or ():
        lay.mount("tmpfs", path, ["--perms", DIR_MODE, "--tmpfs", path])
    for path in desc.get("expose") or ():
        lay.mount("bind", path, ["--ro-bind", path, path])
    for path in desc.get("private") or ():
        lay.mount("tmpfs", path, ["--perms", DIR_MODE, "--tmpfs", path])
    for path, is_dir in desc.get("conceal") or ():
        if lay.shows_host(path):
            args = ["--perms", DIR_MODE, "--tmpfs", path] if is_dir else None
            lay.mount(
                "tmpfs" if is_dir else "bind",
                path,
                args or ["--ro-bind", "/dev/null", path],
            )
    for path in desc.get("writable") or ():
        lay.mount("bind", path, ["--bind", path, path])
    out = [str(desc["bwrap"]), *lay.args]
    if desc.get("chdir"):
        out += ["--chdir", str(desc["chdir"])]
    out += NAMESPACE_FLAGS
    uid = desc.get("uid")
    if desc.get("userns"):
        out.append("--unshare-user")
    if uid is not None:
        # Just what setpriv needs to drop to the run's uid, and for bwrap to chdir into
        # the workdir that uid owns (0700) on the way; the change of uid then clears every
        # capability, and no-new-privs keeps them from coming back through exec.
        out += [arg for cap in ROOT_CAPS for arg in ("--cap-add", cap)]
    if status_fd is not None:
        out += ["--json-status-fd", str(status_fd)]
    out.append("--")
    if uid is not None:
        out += [
            str(desc["setpriv"]),
            "--reuid",
            str(uid),
            "--regid",
            str(uid),
            "--clear-groups",
            "--no-new-privs",
            "--inh-caps=-all",
            "--",
        ]
    return out + list(argv)


# -- what came back --------------------------------------------------------------------------
def workload_returncode(bwrap_returncode: int, reported_exit: int | None) -> tuple[int, bool]:
    """The workload's return code as ``Popen`` gives it (negative: killed by that
    signal) and whether the sandbox failed before the workload ran.

    bwrap reports the workload's end in the shell's encoding (n, or 128+n for signal n),
    on its status fd and as its own exit code; a workload that exits 128+n by itself
    therefore reads as killed by signal n (as it does under a shell today). No exit code
    on the status fd means bwrap failed to set up (or exec) before anything ran. A
    negative ``bwrap_returncode`` is bwrap itself killed: the SIGKILL after the grace.
    """
    if bwrap_returncode < 0:
        return bwrap_returncode, False
    if reported_exit is None:
        return bwrap_returncode, bwrap_returncode != 0
    if 128 < reported_exit <= 128 + LAST_SIGNAL:
        return -(reported_exit - 128), False
    return reported_exit, False
