"""The server's workload isolation: settings checked at start, the sandbox policy built.

A server in sandbox mode (``--isolation sandbox``; what ``--shared`` requires) starts only
once a sandbox made exactly as for a run has worked (``isolation.probe``), so a machine
that cannot isolate workloads is refused with one line saying why and what to do, before
anything is published. See docs/isolation.md.
"""

from __future__ import annotations

import os
from pathlib import Path

from taugrid.executors.local import isolation, sandbox
from taugrid.server.settings import ServerSettings

MODES = ("none", "sandbox")
INSTALL_BWRAP = "install it (Debian/Ubuntu: apt install bubblewrap) or name it with --bwrap PATH"


class SandboxUnavailable(Exception):
    """The settings ask for a sandbox this machine cannot give; the message says why."""


def why_sandbox(settings: ServerSettings) -> str:
    who = "a shared server" if settings.shared else "--isolation sandbox"
    return (
        f"{who} runs every workload in a sandbox so it cannot read TAU_HOME, other runs "
        "or the server's tokens"
    )


def settings_problem(settings: ServerSettings) -> str | None:
    """What is wrong with the isolation settings (a usage error), or None."""
    if settings.isolation is not None and settings.isolation not in MODES:
        return f"--isolation must be one of {', '.join(MODES)}, not {settings.isolation!r}"
    if settings.cluster and settings.isolation == "sandbox":
        return (
            "--isolation is for workloads run as the server's processes; a cluster server's "
            "run in pods (leave --isolation out with --executor kubernetes)"
        )
    if settings.shared and not settings.sandboxed and not settings.cluster:
        return (
            "a shared server must isolate workloads (--isolation sandbox): with "
            "--isolation none every researcher's job could read TAU_HOME, the server's "
            "tokens and every other run"
        )
    try:
        sandbox.parse_uid_range(settings.workload_uids)
    except ValueError as exc:
        return str(exc)
    for path in settings.sandbox_binds:
        if not path.startswith("/"):
            return f"--sandbox-bind needs an absolute path, not {path!r}"
    return None


def sandbox_policy(settings: ServerSettings) -> isolation.SandboxPolicy | None:
    """The policy for the executor; None without isolation. SandboxUnavailable when a
    tool is missing (``check`` has said so at start-up already)."""
    if not settings.sandboxed:
        return None
    bwrap = isolation.find_tool(settings.bwrap)
    if bwrap is None:
        raise SandboxUnavailable(
            f"{why_sandbox(settings)}; bubblewrap ({settings.bwrap}) was not found: "
            + INSTALL_BWRAP
        )
    uids, setpriv = None, None
    if os.geteuid() == 0:  # a uid per run, as a batch system runs jobs as the submitter
        uids = sandbox.parse_uid_range(settings.workload_uids)
        setpriv = isolation.find_tool("setpriv")
        if setpriv is None:
            raise SandboxUnavailable(
                f"{why_sandbox(settings)} as a uid of its own; setpriv was not found: "
                "install util-linux (Debian/Ubuntu: apt install util-linux)"
            )
    home = str(settings.home.resolve())
    user_home = sandbox.clean(os.path.expanduser("~")) or "/"
    return isolation.SandboxPolicy(
        bwrap=bwrap,
        private=(home,),
        hidden=() if user_home == "/" else (user_home,),
        conceal=tuple(_server_files(settings)),
        binds=settings.sandbox_binds,
        uids=uids,
        setpriv=setpriv,
    )


def _server_files(settings: ServerSettings) -> list[str]:
    """The server user's own secrets outside TAU_HOME: its CLI contexts (tokens) and the
    OIDC client secret. Hidden even where an exposed path would show them."""
    files: list[str] = []
    explicit = os.environ.get("TAU_CONFIG")
    if explicit:
        config = Path(explicit).expanduser().absolute()
        files += [str(config), str(config.with_name("config.json"))]
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    files.append(str(Path(base) / "tau"))
    if settings.oidc_client_secret_file is not None:
        files.append(str(Path(settings.oidc_client_secret_file).absolute()))
    return [p for f in files if (p := sandbox.clean(f))]


def check(settings: ServerSettings) -> str | None:
    """At start-up: None when workloads can be isolated as the settings ask (or need not
    be); otherwise the one line to print before exiting."""
    try:
        policy = sandbox_policy(settings)
    except SandboxUnavailable as exc:
        return str(exc)
    if policy is None:
        return None
    problem = isolation.probe(policy, settings.home)
    if problem is None:
        return None
    hint = (
        "bwrap needs unprivileged user namespaces when the server does not run as root "
        "(sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces > 0)"
        if os.geteuid() != 0
        else "check that bwrap and setpriv work here"
    )
    return f"{why_sandbox(settings)}; the sandbox does not work on this machine: {problem}; {hint}"
