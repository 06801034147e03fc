"""Write a commented starter tau.yaml."""

from __future__ import annotations

from pathlib import Path

import click

from taugrid.errors import UsageError


@click.command(name="init", help=__doc__)
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path), default="tau.yaml")
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
def command(file: Path, force: bool) -> None:
    from taugrid.spec.starter import STARTER_TAU_YAML, STARTER_TRAIN_PY

    if file.exists() and not force:
        raise UsageError(f"{file} exists; use --force to overwrite it")
    file.parent.mkdir(parents=True, exist_ok=True)  # tau init new-project/tau.yaml
    file.write_text(STARTER_TAU_YAML)
    # The starter's command is `python train.py`: give it one that runs, never replacing
    # the user's own.
    script = file.parent / "train.py"
    if script.exists():
        click.echo(f"wrote {file}; it runs your train.py (edit `command:` if that is wrong)")
    else:
        script.write_text(STARTER_TRAIN_PY)
        click.echo(f"wrote {file} and {script}, an example workload to replace with your own")
    click.echo(f"check it with: tau validate {file}; run it with: tau run --wait")
