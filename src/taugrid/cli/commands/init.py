"""Write a commented starter tau.yaml."""

from __future__ import annotations

from pathlib import Path

import click

from taugrid.errors import UsageError


@click.command(name="init", help=__doc__)
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path), default="tau.yaml")
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
def command(file: Path, force: bool) -> None:
    from taugrid.spec import STARTER_TAU_YAML

    if file.exists() and not force:
        raise UsageError(f"{file} exists; use --force to overwrite it")
    file.write_text(STARTER_TAU_YAML)
    click.echo(f"wrote {file}; check it with: tau validate {file}")
