"""How torchrun runs a run's command in each worker, the same on one machine and on a
cluster (``executors.local.launch``, ``manifests.workloads``). Pure.

``<target>`` is what torchrun runs in each worker: ``python train.py a b`` -> ``train.py a
b``; ``python -m pkg.mod a`` -> ``-m pkg.mod a``; ``train.py a`` -> ``train.py a``
(torchrun runs scripts with its own interpreter and ``-u``, so a leading ``-u`` is
dropped); anything else, including ``python`` with other interpreter options, runs as is:
``--no-python <argv>``. A string without shell syntax is split like a list; one with shell
syntax runs in a shell in each worker (``--no-python /bin/sh -c <command>``). The
launcher's interpreter is the python the command names, else ``python3``.
"""

from __future__ import annotations

import os
import re
import shlex

from taugrid.errors import UsageError

# Launcher interpreter when the command does not name one.
DEFAULT_PYTHON = "python3"
TORCH_RUN_MODULE = "torch.distributed.run"

# A shell would treat these specially, so a string holding one is left to a shell.
_SHELL_SYNTAX = re.compile(r"[$`|&;<>(){}\[\]*?~#!\\\n]")
_PYTHON_NAME = re.compile(r"python(\d+(\.\d+)*)?")

Command = list[str] | str


def _is_python(arg: str) -> bool:
    return _PYTHON_NAME.fullmatch(os.path.basename(arg)) is not None


def _shell_python(command: str) -> str:
    """The interpreter a shell command starts with (``python train.py $X``), else python3."""
    try:
        words = shlex.split(command)
    except ValueError:
        return DEFAULT_PYTHON
    return words[0] if words and _is_python(words[0]) and "$" not in words[0] else DEFAULT_PYTHON


def torchrun_target(command: Command) -> tuple[str, list[str]]:
    """The launcher's interpreter and what torchrun runs in each worker."""
    if isinstance(command, str):
        if not command.strip():
            raise UsageError("command is empty")
        if _SHELL_SYNTAX.search(command):
            return _shell_python(command), ["--no-python", "/bin/sh", "-c", command]
        try:
            argv = shlex.split(command)
        except ValueError as exc:  # e.g. an unclosed quote
            raise UsageError(f"cannot split the command {command!r}: {exc}") from exc
    else:
        argv = list(command)
    if not argv:
        raise UsageError("command is empty")
    first = argv[0]
    if first.endswith(".py"):
        return DEFAULT_PYTHON, argv
    if not _is_python(first):
        return DEFAULT_PYTHON, ["--no-python", *argv]
    rest = argv[1:]
    while rest and rest[0] == "-u":  # torchrun starts scripts with -u itself
        rest = rest[1:]
    if rest and rest[0] == "-m" and len(rest) > 1:
        return first, rest
    if rest and not rest[0].startswith("-"):
        return first, rest
    # Other interpreter options, `-` (stdin) or no script: run the command as written.
    return first, ["--no-python", *argv]
