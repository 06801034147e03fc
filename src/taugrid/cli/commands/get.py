"""Download the files a run wrote.

Everything the run put in TAU_OUTPUT_DIR and the paths listed in outputs:.
"""

from __future__ import annotations

import os
import urllib.parse
from pathlib import Path

import click

from taugrid.cli.connect import connect
from taugrid.cli.output import emit_json, output_option
from taugrid.errors import UsageError


@click.command(name="get", help=__doc__)
@click.argument("run")
@click.option(
    "-d",
    "--dir",
    "dest",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where to put the files (default: ./<run id>).",
)
@output_option
def command(run: str, dest: Path | None, output: str) -> None:
    client = connect()
    listing = client.artifacts(run)
    root = (dest or Path(listing["run_id"])).resolve()
    written = []
    for art in listing["artifacts"]:
        target = (root / art["path"]).resolve()
        if not target.is_relative_to(root):
            raise UsageError(f"refusing artifact path outside {root}: {art['path']}")
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".part")
        path = f"/runs/{listing['run_id']}/artifacts/{urllib.parse.quote(art['path'])}"
        with tmp.open("wb") as f:
            for chunk in client.stream(path):
                f.write(chunk)
        os.replace(tmp, target)
        written.append({"path": art["path"], "size": art["size"], "local": str(target)})
    if output == "json":
        emit_json({"run_id": listing["run_id"], "dir": str(root), "files": written})
    elif written:
        click.echo(f"{len(written)} file(s) of {listing['run_id']} in {root}")
        for w in written:
            click.echo(f"  {w['path']}  ({w['size']} bytes)")
    else:
        click.echo(f"run {listing['run_id']} wrote no output files")
