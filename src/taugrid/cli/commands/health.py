"""Run the GPU health agent of a cluster node.

``tau health agent`` reads this node's GPUs (NVML, the kernel log, or a replay file for a
drill) and reports to the server, which cordons, taints and evicts (docs/gpu-health.md).
It runs as a DaemonSet on every GPU node, with an agent account's token
(``tau admin user add NAME --agent``).
"""

from __future__ import annotations

import sys

import click


@click.group(name="health", help="Run the GPU health agent of a cluster node.")
def command() -> None:
    pass


@command.command(
    name="agent",
    context_settings={"ignore_unknown_options": True, "help_option_names": []},
    add_help_option=False,
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def agent(args: tuple[str, ...]) -> None:
    """Read this node's GPUs and report to the server (--help for the options)."""
    from taugrid.healthagent import main  # only here: the CLI's start stays light

    sys.exit(main(list(args)))
