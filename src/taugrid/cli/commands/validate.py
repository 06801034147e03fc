"""Check a tau.yaml without submitting it.

Also against the mode of the context's server (never started for this): what that mode
would refuse at submit is an error, what it would ignore a note.
"""

from __future__ import annotations

from pathlib import Path

import click

from taugrid.cli.output import emit_json, output_option


@click.command(name="validate", help=__doc__)
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path), default="tau.yaml")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a field.")
@output_option
def command(file: Path, sets: tuple[str, ...], output: str) -> None:
    from taugrid.cli.servermode import for_validate
    from taugrid.errors import SpecError, UsageError
    from taugrid.spec import inactive_fields, load_spec, refusal, refusals

    try:
        loaded = load_spec(file, list(sets))
    except SpecError as exc:
        if output != "json":
            raise
        # Machine-readable to the end: editors and CI parse this, on stdout, exit code 2.
        emit_json({"valid": False, "problems": [p.__dict__ for p in exc.problems]})
        raise SystemExit(exc.exit_code) from None
    caps, unchecked = for_validate()
    mode = caps.mode if caps is not None else None
    if caps is not None and (refused := refusal(loaded.spec, caps)) is not None:
        if output != "json":
            raise UsageError(refused)  # the server's own words: "tau: nodes: 2: ..."
        emit_json(
            {"valid": False, "mode": mode, "problems": [], "refused": refusals(loaded.spec, caps)}
        )
        raise SystemExit(UsageError.exit_code)
    notes = inactive_fields(loaded.spec, caps) if caps is not None else []
    if output == "json":
        emit_json(
            {
                "valid": True,
                "name": loaded.spec.name,
                "spec_hash": loaded.spec_hash,
                "resolved": loaded.resolved,
                "notes": notes,
                "mode": mode,
            }
        )
        return
    click.echo(f"{file}: valid (name {loaded.spec.name}, spec hash {loaded.spec_hash[:12]})")
    for note in [*notes, *([unchecked] if unchecked else [])]:
        click.echo(f"  note: {note}")
