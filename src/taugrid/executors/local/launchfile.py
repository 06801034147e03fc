"""What the supervisor reads from ``launch.json``: checks, the command line and the
secrets. Stdlib only (see ``supervisor``'s docstring for why).

A run of several nodes (``nodes: N`` in local mode) has ``nodes`` besides: one
``{"command", "env"}`` per node, its command and what its launcher adds to ``env`` for it
(``nodegroup``); the top-level ``command`` and ``env`` stay those of the run."""

from __future__ import annotations

import os
from typing import Any


def workload_argv(command: list[str] | str, setup: str | None) -> list[str]:
    if isinstance(command, str):
        if setup:
            # Braces (not a subshell) so `cd` or `export` in setup apply to the command; the
            # newlines let either part end with a comment or `&`.
            return ["/bin/sh", "-c", f"{{ {setup}\n}} && {{\n{command}\n}}"]
        return ["/bin/sh", "-c", command]
    if setup:
        import shlex

        return ["/bin/sh", "-c", f"{{ {setup}\n}} && exec {shlex.join(command)}"]
    return list(command)


def check_launch(launch: Any) -> str | None:
    """A problem with launch.json, or None."""
    if not isinstance(launch, dict):
        return "launch.json is not an object"
    problem = _check_command_and_env(launch, "")
    if problem is not None:
        return problem
    nodes = launch.get("nodes")
    if nodes is not None:
        if not isinstance(nodes, list) or not nodes:
            return "nodes must be a non-empty list or null"
        for i, node in enumerate(nodes):
            problem = (
                _check_command_and_env(node, f"nodes[{i}].")
                if isinstance(node, dict)
                else f"nodes[{i}] is not an object"
            )
            if problem is not None:
                return problem
    if not isinstance(launch.get("cwd"), str):
        return "cwd must be a string"
    if launch.get("setup") is not None and not isinstance(launch["setup"], str):
        return "setup must be a string or null"
    files = launch.get("secret_files")
    if files is not None and not (
        isinstance(files, dict)
        and all(
            isinstance(k, str)
            and k
            and "=" not in k
            and "\0" not in k
            and isinstance(v, str)
            and os.path.isabs(v)
            for k, v in files.items()
        )
    ):
        return "secret_files must map environment variable names to absolute paths"
    return None


def _check_command_and_env(launch: dict[str, Any], where: str) -> str | None:
    cmd = launch.get("command")
    if not (isinstance(cmd, str) and cmd.strip()) and not (
        isinstance(cmd, list) and cmd and all(isinstance(a, str) for a in cmd)
    ):
        return f"{where}command must be a non-empty string or list of strings"
    env = launch.get("env")
    if not isinstance(env, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in env.items()
    ):
        return f"{where}env must map strings to strings"
    return None


def read_secrets(files: dict[str, str] | None) -> dict[str, str]:
    """ENV_NAME -> value of each secret file; OSError naming the variable and path only.

    Bytes that are not UTF-8 survive (surrogateescape), as they would in any environment.
    """
    values: dict[str, str] = {}
    for name, path in (files or {}).items():
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as exc:
            why = exc.strerror or type(exc).__name__
            raise OSError(f"secret {name}: cannot read {path}: {why}") from None
        if b"\0" in data:
            raise OSError(f"secret {name}: {path} holds a NUL byte, which an environment cannot")
        values[name] = data.decode("utf-8", "surrogateescape")
    return values
