"""The click command group. Commands load lazily from :mod:`taugrid.cli.registry`."""

from __future__ import annotations

import importlib
import os

import click

from taugrid import __version__
from taugrid.cli.fasthelp import CLICK_HELP, OPTIONS
from taugrid.cli.registry import COMMANDS


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        module = importlib.import_module(f"taugrid.cli.commands.{entry[0]}")
        cmd: click.Command = module.command
        return cmd

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        if name and not name.startswith("-") and name not in COMMANDS:
            import difflib

            close = difflib.get_close_matches(name, list(COMMANDS), n=3, cutoff=0.6)
            hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            ctx.fail(f"No such command '{name}'.{hint} (tau --help lists them)")
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # From the table, so listing commands imports none of them.
        with formatter.section("Commands"):
            formatter.write_dl([(name, hlp) for name, (_, hlp) in COMMANDS.items()])


@click.group(
    cls=LazyGroup, help=CLICK_HELP, context_settings={"help_option_names": ["-h", "--help"]}
)
@click.option("--debug", is_flag=True, help=OPTIONS[0][1])
# Read by connect.selected(); precedence in taugrid.cli.contexts.
@click.option("--context", "context_name", metavar="NAME", help=OPTIONS[1][1])
@click.version_option(__version__, "--version", prog_name="tau", message="%(prog)s %(version)s")
@click.pass_context
def cli(ctx: click.Context, debug: bool, context_name: str | None) -> None:
    ctx.obj = {"debug": debug or bool(os.environ.get("TAU_DEBUG")), "context": context_name}
