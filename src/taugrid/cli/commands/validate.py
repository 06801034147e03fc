"""Check a tau.yaml without submitting it."""

from __future__ import annotations

from pathlib import Path

import click

from taugrid.cli.output import emit_json, output_option


@click.command(name="validate", help=__doc__)
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path), default="tau.yaml")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a field.")
@output_option
def command(file: Path, sets: tuple[str, ...], output: str) -> None:
    from taugrid.errors import SpecError
    from taugrid.spec import inactive_fields, load_spec

    try:
        loaded = load_spec(file, list(sets))
    except SpecError as exc:
        if output != "json":
            raise
        # Machine-readable to the end: editors and CI parse this, on stdout, exit code 2.
        emit_json({"valid": False, "problems": [p.__dict__ for p in exc.problems]})
        raise SystemExit(exc.exit_code) from None
    notes = inactive_fields(loaded.spec, "local")
    if output == "json":
        emit_json(
            {
                "valid": True,
                "name": loaded.spec.name,
                "spec_hash": loaded.spec_hash,
                "resolved": loaded.resolved,
                "notes": notes,
            }
        )
        return
    click.echo(f"{file}: valid (name {loaded.spec.name}, spec hash {loaded.spec_hash[:12]})")
    for note in notes:
        click.echo(f"  note: {note}")
