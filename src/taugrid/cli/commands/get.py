"""Download the files a run wrote, or a checkpoint.

Everything the run put in TAU_OUTPUT_DIR and the paths listed in outputs:. With
--checkpoint, the files of a checkpoint instead (the newest verified one, or STEP) into
DIR/step-NNNNNNNNNN/ with its manifest, each file checked against its sha256. A directory
tau get creates holds a .gitignore of `*`: what it downloads never enters git or the code
snapshot of a later tau run.
"""

from __future__ import annotations

import hashlib
import json
import os
import urllib.parse
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import click

from taugrid.cli.client import Client
from taugrid.cli.connect import connect
from taugrid.cli.output import emit_json, output_option
from taugrid.cli.refs import in_workspace, workspace_option
from taugrid.errors import Conflict, NotFound, TauError, UsageError

MANIFEST = "tau-checkpoint.json"  # the SDK's name for it, inside each checkpoint


@click.command(name="get", help=__doc__)
@click.argument("run")
@workspace_option
@click.option(
    "-d",
    "--dir",
    "dest",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where to put the files (default: ./<run id>).",
)
@click.option(
    "--checkpoint",
    is_flag=False,
    flag_value="newest",
    default=None,
    metavar="[STEP]",
    help="Download a checkpoint: STEP, or without it the newest verified one.",
)
@click.option("--force", is_flag=True, help="With --checkpoint: take one that did not verify.")
@output_option
def command(
    run: str,
    workspace: str | None,
    dest: Path | None,
    checkpoint: str | None,
    force: bool,
    output: str,
) -> None:
    client = connect()
    run = in_workspace(client, run, workspace)
    if checkpoint is not None:
        get_checkpoint(client, run, _step(checkpoint), dest, force, output)
        return
    if force:
        raise UsageError("--force goes with --checkpoint")
    listing = client.artifacts(run)
    root = (dest or Path(listing["run_id"])).resolve()
    mark_download(root)
    written = []
    for art in listing["artifacts"]:
        target = _inside(root, art["path"])
        path = f"/runs/{listing['run_id']}/artifacts/{urllib.parse.quote(art['path'])}"
        _download(client.stream(path), target)
        written.append({"path": art["path"], "size": art["size"], "local": str(target)})
    if output == "json":
        emit_json({"run_id": listing["run_id"], "dir": str(root), "files": written})
    elif written:
        click.echo(f"{len(written)} file(s) of {listing['run_id']} in {root}")
        for w in written:
            click.echo(f"  {w['path']}  ({w['size']} bytes)")
    else:
        click.echo(f"run {listing['run_id']} wrote no output files")


def _step(text: str) -> int | None:
    if text == "newest":
        return None
    if not text.isdigit():
        raise UsageError(f"--checkpoint {text!r}: give a step number, or nothing for the newest")
    return int(text)


def choose_checkpoint(
    run_id: str, checkpoints: list[dict[str, Any]], step: int | None, force: bool
) -> dict[str, Any]:
    """The checkpoint to download from a listing (newest step first)."""
    if not checkpoints:
        raise NotFound(f"run {run_id} has no checkpoints")
    if step is None:
        chosen = next((c for c in checkpoints if c["verified"]), None)
        if chosen is None:
            newest = checkpoints[0]
            if not force:
                raise NotFound(
                    f"run {run_id} has no verified checkpoint (newest: step {newest['step']}, "
                    f"{newest.get('problem') or 'not verified'}); --force downloads it anyway"
                )
            chosen = newest
    else:
        chosen = next((c for c in checkpoints if c["step"] == step), None)
        if chosen is None:
            steps = ", ".join(str(c["step"]) for c in checkpoints)
            raise NotFound(f"run {run_id} has no checkpoint at step {step} (it has: {steps})")
    if not chosen["verified"] and not force:
        raise Conflict(
            f"checkpoint step {chosen['step']} of run {run_id} did not verify: "
            f"{chosen.get('problem') or 'unknown problem'}; --force downloads it anyway"
        )
    return chosen


def get_checkpoint(
    client: Client, run: str, step: int | None, dest: Path | None, force: bool, output: str
) -> None:
    listing = client.checkpoints(run)
    run_id = listing["run_id"]
    ck = choose_checkpoint(run_id, listing["checkpoints"], step, force)
    base = (dest or Path(run_id)).resolve()
    mark_download(base)
    root = base / f"step-{ck['step']:010d}"
    written, bad = [], []
    for f in ck["files"]:
        target = _inside(root, f["path"])
        chunks = client.checkpoint_file(run_id, ck["step"], f["path"])
        if _download(chunks, target, expect=f["sha256"]) != f["sha256"]:
            bad.append(f["path"])
            continue
        written.append({"path": f["path"], "size": f["size"], "local": str(target)})
    if bad:
        raise TauError(
            f"{len(bad)} file(s) of checkpoint step {ck['step']} did not match their sha256 "
            f"after download (not kept): {', '.join(bad[:5])}"
        )
    if not any(f["path"] == MANIFEST for f in ck["files"]):
        _write_manifest(client, run_id, ck, root / MANIFEST)
    if output == "json":
        emit_json(
            {
                "run_id": run_id,
                "step": ck["step"],
                "verified": ck["verified"],
                "dir": str(root),
                "files": written,
            }
        )
    else:
        state = "verified" if ck["verified"] else f"NOT verified: {ck.get('problem')}"
        click.echo(
            f"checkpoint step {ck['step']} of {run_id} ({state}): "
            f"{len(written)} file(s) in {root}, each matching its sha256"
        )


def _write_manifest(client: Client, run_id: str, ck: dict[str, Any], target: Path) -> None:
    """The checkpoint's own manifest when the server serves it, else the same document
    built from the listing, so the directory is a checkpoint the SDK can load."""
    try:
        _download(client.checkpoint_file(run_id, ck["step"], MANIFEST), target)
        json.loads(target.read_bytes())
        return
    except (NotFound, ValueError):
        pass
    doc = {
        "format": 1,
        "step": ck["step"],
        "time": ck["created_at"],
        "attempt": ck.get("attempt"),
        "run_id": run_id,
        "files": [
            {"path": f["path"], "size": f["size"], "sha256": f["sha256"]} for f in ck["files"]
        ],
        "total_size": sum(f["size"] for f in ck["files"]),
    }
    target.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")


DOWNLOAD_IGNORE = (
    "# Written by `tau get`: this directory holds a run's downloaded files. The `*` below\n"
    "# keeps them out of git and out of the code snapshot of every later `tau run`.\n"
    "*\n"
)


def mark_download(root: Path) -> None:
    """Create ``root`` for a download and, when TauGrid created it, put a ``.gitignore``
    of ``*`` in it: git and the snapshot (which honours nested .gitignore files) then skip
    it, so a model fetched into the workdir never rides along with the next run or makes
    the repository look dirty. A directory the user already had is left as it is."""
    if root.exists():
        return
    root.mkdir(parents=True)
    (root / ".gitignore").write_text(DOWNLOAD_IGNORE)


def _inside(root: Path, rel: str) -> Path:
    target = (root / rel).resolve()
    if not target.is_relative_to(root):
        raise UsageError(f"refusing a path outside {root}: {rel}")
    return target


def _download(chunks: Iterable[bytes], target: Path, expect: str | None = None) -> str:
    """Stream into ``target`` through a .part file renamed into place, but only if its
    sha256 is ``expect`` (when given); returns the sha256."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".part")
    sha = hashlib.sha256()
    try:
        with tmp.open("wb") as f:
            for chunk in chunks:
                sha.update(chunk)
                f.write(chunk)
        if expect is None or sha.hexdigest() == expect:
            os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return sha.hexdigest()
