"""The sandbox's pure parts on plain data: bwrap's command line, what is hidden, what is
bound, the uid of a run, the directories made for mount points, the exit status."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from taugrid.executors.local import sandbox

HOME = "/srv/tau"  # TAU_HOME
USER_HOME = "/root"
RUN = f"{HOME}/runs/r1"


def desc(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "bwrap": "/usr/bin/bwrap",
        "uid": 2000123,
        "setpriv": "/usr/bin/setpriv",
        "userns": False,
        "devices": [],
        "scratch": list(sandbox.SCRATCH_DIRS),
        "hidden": [USER_HOME],
        "expose": ["/root/.pyenv/versions/3.11.7"],
        "private": [HOME],
        "conceal": [],
        "writable": [
            f"{RUN}/workdir",
            f"{RUN}/checkpoints",
            f"{RUN}/outputs",
            f"{RUN}/home",
            f"{RUN}/attempts/0/metrics.jsonl",
        ],
        "chdir": f"{RUN}/workdir",
    }
    base.update(over)
    return base


def mounts(argv: list[str]) -> list[tuple[str, str, str | None]]:
    """(operation, destination, mode) of each filesystem argument, in order."""
    out: list[tuple[str, str, str | None]] = []
    i, mode = 1, None
    while argv[i] != "--":
        arg = argv[i]
        if arg == "--perms":
            mode, i = argv[i + 1], i + 2
            continue
        if arg in ("--ro-bind", "--bind", "--dev-bind"):
            out.append((arg[2:], argv[i + 2], None))
            i += 3
        elif arg in ("--tmpfs", "--dir", "--proc", "--dev"):
            out.append((arg[2:], argv[i + 1], mode))
            i += 2
        elif arg in ("--chdir", "--cap-add", "--cap-drop", "--json-status-fd"):
            i += 2
        else:
            i += 1
        mode = None
    return out


def shows(argv: list[str], path: str) -> str:
    """What ``path`` shows inside the sandbox: "host", "empty" (a tmpfs) or "made"."""
    seen = "host"
    for op, dest, _ in mounts(argv):
        if sandbox.is_under(path, dest):
            if op in ("ro-bind", "bind", "dev-bind", "proc"):
                seen = "host"
            elif op in ("tmpfs", "dev"):
                seen = "empty"
            elif op == "dir" and dest == path:
                seen = "made"
    return seen


# -- the uid --------------------------------------------------------------------------------
def test_uid_is_stable_in_range_and_differs_between_runs() -> None:
    uids = {sandbox.workload_uid(f"train-{i:04d}", 2_000_000, 2_999_999) for i in range(200)}
    assert all(2_000_000 <= u <= 2_999_999 for u in uids)
    assert len(uids) > 190  # derived from the id: collisions are rare
    assert sandbox.workload_uid("run-a", 10, 20) == sandbox.workload_uid("run-a", 10, 20)
    assert sandbox.workload_uid("run-a", 5, 5) == 5


@pytest.mark.parametrize(
    ("text", "want"),
    [("2000000-2999999", (2_000_000, 2_999_999)), (" 7-7 ", (7, 7))],
)
def test_uid_range_parses(text: str, want: tuple[int, int]) -> None:
    assert sandbox.parse_uid_range(text) == want


@pytest.mark.parametrize("text", ["0-10", "10-5", "abc", "5", "-5-10", "1-4294967295", ""])
def test_uid_range_refuses_root_reversed_and_garbage(text: str) -> None:
    with pytest.raises(ValueError, match="workload uids"):
        sandbox.parse_uid_range(text)


# -- what needs binding ----------------------------------------------------------------------
def test_candidates_come_from_the_environment_and_an_absolute_argv0() -> None:
    env = {
        "PATH": "/root/venv/bin:relative/bin::/usr/bin:/root/venv/bin",
        "VIRTUAL_ENV": "/root/venv",
        "CONDA_PREFIX": "/opt/conda/envs/x",
        "PYTHONPATH": "/root/src:/root/src/../lib",
        "HOME": "/root",  # not a tool path
    }
    got = sandbox.candidate_paths(env, ["/root/tools/run", "x"])
    assert got == [
        "/root/venv/bin",
        "/usr/bin",
        "/root/src",
        "/root/lib",
        "/root/venv",
        "/opt/conda/envs/x",
        "/root/tools/run",
    ]
    assert sandbox.candidate_paths({}, "python train.py") == []  # a shell line: PATH decides
    assert sandbox.candidate_paths({}, ["python"]) == []


def test_only_hidden_paths_are_bound_never_tau_home_nor_above_a_hidden_root() -> None:
    hidden = ["/tmp", "/var/tmp", "/dev/shm", "/root"]
    got = sandbox.select_exposures(
        [
            "/usr/bin",  # visible anyway
            "/root/.pyenv/versions/3.11.7",
            "/root/.pyenv/versions/3.11.7/bin",  # inside the one above
            "/root",  # the hidden root itself: would show all of it
            "/",  # above every hidden root
            "/tmp/venv/bin",
            f"{HOME}/runs/other/workdir",  # TAU_HOME: never
            HOME,
            "/srv",  # above TAU_HOME but not hidden: visible anyway, tmpfs comes after
            "relative",
        ],
        hidden,
        [HOME],
    )
    assert got == ["/root/.pyenv/versions/3.11.7", "/tmp/venv/bin"]


def test_python_prefixes() -> None:
    assert sandbox.python_prefix("/root/.pyenv/versions/3.11.7/bin/python3.11") == (
        "/root/.pyenv/versions/3.11.7"
    )
    assert sandbox.python_prefix("/opt/py/python3") == "/opt/py"
    assert sandbox.venv_home_prefix("/root/.pyenv/versions/3.11.7/bin") == (
        "/root/.pyenv/versions/3.11.7"
    )
    assert sandbox.venv_home_prefix("/opt/python/") == "/opt/python"


# -- the command line -----------------------------------------------------------------------
def test_command_line_shape_and_order() -> None:
    argv = sandbox.bwrap_argv(desc(), ["python", "train.py"], status_fd=7)
    assert argv[:9] == [
        "/usr/bin/bwrap",
        "--ro-bind",
        "/",
        "/",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--perms",
    ]
    ops = mounts(argv)
    order = [(op, dest) for op, dest, _ in ops if op != "dir"]
    assert order == [
        ("ro-bind", "/"),
        ("proc", "/proc"),
        ("dev", "/dev"),
        ("tmpfs", "/tmp"),
        ("tmpfs", "/var/tmp"),
        ("tmpfs", "/dev/shm"),
        ("tmpfs", "/root"),  # hidden, then what the workload needs of it
        ("ro-bind", "/root/.pyenv/versions/3.11.7"),
        ("tmpfs", HOME),  # private: after every exposure
        ("bind", f"{RUN}/workdir"),
        ("bind", f"{RUN}/checkpoints"),
        ("bind", f"{RUN}/outputs"),
        ("bind", f"{RUN}/home"),
        ("bind", f"{RUN}/attempts/0/metrics.jsonl"),
    ]
    modes = {dest: mode for op, dest, mode in ops if op == "tmpfs"}
    assert modes == {
        "/tmp": "1777",
        "/var/tmp": "1777",
        "/dev/shm": "1777",
        "/root": "0755",
        HOME: "0755",
    }
    tail = argv[argv.index("--chdir") :]
    assert tail == [
        "--chdir",
        f"{RUN}/workdir",
        "--unshare-pid",
        "--unshare-ipc",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--cap-add",
        "CAP_SETUID",
        "--cap-add",
        "CAP_SETGID",
        "--cap-add",
        "CAP_DAC_READ_SEARCH",
        "--json-status-fd",
        "7",
        "--",
        "/usr/bin/setpriv",
        "--reuid",
        "2000123",
        "--regid",
        "2000123",
        "--clear-groups",
        "--no-new-privs",
        "--inh-caps=-all",
        "--",
        "python",
        "train.py",
    ]
    assert "--unshare-net" not in argv and "--unshare-user" not in argv  # host network


def test_directories_for_mount_points_are_made_traversable_once() -> None:
    argv = sandbox.bwrap_argv(desc(), ["true"])
    made = [(dest, mode) for op, dest, mode in mounts(argv) if op == "dir"]
    assert made == [
        ("/root/.pyenv", "0755"),
        ("/root/.pyenv/versions", "0755"),
        (f"{HOME}/runs", "0755"),
        (RUN, "0755"),
        (f"{RUN}/attempts", "0755"),
        (f"{RUN}/attempts/0", "0755"),
    ]
    # /srv exists on the host (under the read-only root): nothing to make there.
    assert all(not dest.startswith("/srv/") or dest.startswith(HOME) for dest, _ in made)


def test_tau_home_under_a_scratch_dir_gets_its_parents_made() -> None:
    home = "/tmp/pytest/x/home"
    run = f"{home}/runs/r"
    argv = sandbox.bwrap_argv(
        desc(private=[home], writable=[f"{run}/workdir"], expose=[], chdir=None), ["true"]
    )
    made = [dest for op, dest, _ in mounts(argv) if op == "dir"]
    assert made == ["/tmp/pytest", "/tmp/pytest/x", f"{home}/runs", run]
    assert "--chdir" not in argv


def test_what_the_workload_sees() -> None:
    argv = sandbox.bwrap_argv(desc(expose=["/root/.pyenv/versions/3.11.7", "/srv"]), ["true"])
    assert shows(argv, f"{HOME}/token") == "empty"
    assert shows(argv, f"{HOME}/runs/other/outputs/x") == "empty"
    assert shows(argv, f"{RUN}/attempts/0/launch.json") == "empty"
    assert shows(argv, f"{RUN}/attempts/0/metrics.jsonl") == "host"
    assert shows(argv, f"{RUN}/workdir/train.py") == "host"
    assert shows(argv, "/root/.ssh/id_ed25519") == "empty"
    assert shows(argv, "/root/.pyenv/versions/3.11.7/lib/python3.11/os.py") == "host"
    assert shows(argv, "/tmp/other-users-file") == "empty"
    assert shows(argv, "/etc/passwd") == "host"


def test_the_servers_files_are_concealed_only_where_they_show() -> None:
    conceal = [["/root/.config/tau", True], ["/etc/tau/oidc-secret", False]]
    argv = sandbox.bwrap_argv(desc(conceal=conceal), ["true"])
    ops = mounts(argv)
    assert ("ro-bind", "/etc/tau/oidc-secret", None) in ops  # /dev/null over it
    assert not any(dest == "/root/.config/tau" for _, dest, _ in ops)  # hidden already
    exposed = desc(conceal=conceal, expose=["/root/.config"])
    argv = sandbox.bwrap_argv(exposed, ["true"])
    assert ("tmpfs", "/root/.config/tau", "0755") in mounts(argv)
    assert shows(argv, "/root/.config/tau/config.yaml") == "empty"
    assert shows(argv, "/root/.config/other/x") == "host"
    i = argv.index("/etc/tau/oidc-secret")
    assert argv[i - 2 : i] == ["--ro-bind", "/dev/null"]


def test_gpus_are_bound_as_devices_and_unprivileged_servers_use_a_user_namespace() -> None:
    d = desc(
        uid=None,
        setpriv=None,
        userns=True,
        devices=["/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-caps/nvidia-cap1"],
    )
    argv = sandbox.bwrap_argv(d, ["nvidia-smi"])
    ops = mounts(argv)
    assert ("dev-bind", "/dev/nvidia0", None) in ops
    assert ("dir", "/dev/nvidia-caps", "0755") in ops
    assert "--unshare-user" in argv
    assert "setpriv" not in " ".join(argv) and "--cap-add" not in argv
    assert argv[argv.index("--") :] == ["--", "nvidia-smi"]


hidden_paths = st.lists(
    st.sampled_from(["/", "/root", "/root/.x", "/srv", HOME, f"{HOME}/runs", "/tmp", "/usr"]),
    max_size=6,
)


@settings(max_examples=200, deadline=None)
@given(hidden_paths, hidden_paths)
def test_no_exposure_ever_shows_tau_home(candidates: list[str], conceal: list[str]) -> None:
    """Whatever a submitter's PATH names, TAU_HOME shows only the run's own directories."""
    expose = sandbox.select_exposures(candidates, [*sandbox.SCRATCH_DIRS, USER_HOME], [HOME])
    argv = sandbox.bwrap_argv(
        desc(expose=expose, conceal=[[c, True] for c in conceal if c not in ("/",)]), ["true"]
    )
    assert shows(argv, f"{HOME}/token") == "empty"
    assert shows(argv, f"{HOME}/tau.db") == "empty"
    assert shows(argv, f"{HOME}/runs/other/checkpoints") == "empty"
    assert shows(argv, f"{RUN}/workdir/x") == "host"


# -- the exit status ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("bwrap_rc", "reported", "want"),
    [
        (0, 0, (0, False)),
        (3, 3, (3, False)),
        (143, 143, (-15, False)),  # killed by SIGTERM, as a shell would report it
        (137, 137, (-9, False)),
        (-9, None, (-9, False)),  # bwrap itself killed: the SIGKILL after the grace
        (1, None, (1, True)),  # bwrap failed before the workload ran
        (127, 127, (127, False)),  # the command was not found (setpriv's exec)
        (0, None, (0, False)),
    ],
)
def test_workload_returncode(bwrap_rc: int, reported: int | None, want: tuple[int, bool]) -> None:
    assert sandbox.workload_returncode(bwrap_rc, reported) == want
