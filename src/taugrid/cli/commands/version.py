"""Print the version of tau."""

from __future__ import annotations

import click

from taugrid import __version__


@click.command(name="version", help=__doc__)
def command() -> None:
    click.echo(f"tau {__version__}")
