"""Submit a run from tau.yaml or a command line.

\b
  tau run                      submit ./tau.yaml
  tau run train.yaml --wait    submit, watch, exit with the run's exit code
  tau run -- python train.py   no file: run this command from the current directory
  tau run --set resources.gpus=2 --set env.LR=1e-3
"""

from __future__ import annotations

import getpass
import os
import uuid
from pathlib import Path
from typing import Any

import click

from taugrid.cli.connect import connect
from taugrid.cli.output import emit_json, output_option
from taugrid.cli.watch import exit_code_of, follow_logs, wait_for
from taugrid.domain.workload_env import submitter_env
from taugrid.errors import UsageError
from taugrid.home import tau_home


class RunCommand(click.Command):
    """Everything after ``--`` is the workload's argv, untouched by option parsing."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if "--" in args:
            i = args.index("--")
            ctx.meta["tau.argv"] = args[i + 1 :]
            args = args[:i]
        return super().parse_args(ctx, args)


@click.command(name="run", cls=RunCommand, help=__doc__)
@click.argument("file", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override any field (dotted path); repeatable.",
)
@click.option("--name", help="Run name (overrides the spec).")
@click.option("--queue", help="Queue to submit to.")
@click.option("--priority", help="Priority class.")
@click.option("--gpus", type=int, help="GPUs per node.")
@click.option("--wait", is_flag=True, help="Block until the run ends; exit with its exit code.")
@click.option("-f", "--follow", is_flag=True, help="Stream the run's logs until it ends.")
@click.option("--detach", is_flag=True, help="Return once submitted (the default).")
@click.option("--idempotency-key", help="Submit at most once for this key (for CI retries).")
@output_option
@click.pass_context
def command(
    ctx: click.Context,
    file: Path | None,
    sets: tuple[str, ...],
    name: str | None,
    queue: str | None,
    priority: str | None,
    gpus: int | None,
    wait: bool,
    follow: bool,
    detach: bool,
    idempotency_key: str | None,
    output: str,
) -> None:
    from taugrid.spec import inactive_fields, load_spec, spec_from_command

    if detach and (wait or follow):
        raise UsageError("--detach cannot be combined with --wait or --follow")
    overrides = list(sets)
    for key, value in (
        ("name", name),
        ("queue", queue),
        ("priority", priority),
        ("resources.gpus", gpus),
    ):
        if value is not None:
            overrides.append(f"{key}={value}")
    argv: list[str] | None = ctx.meta.get("tau.argv")
    if argv is not None:
        if file is not None:
            raise UsageError("give either a spec FILE or a command after --, not both")
        if not argv:
            raise UsageError("nothing after --: give the command to run")
        loaded = spec_from_command(argv, Path.cwd(), overrides)
    else:
        path = file or Path("tau.yaml")
        if not path.exists():
            raise UsageError(
                f"{path}: no such file (write one with `tau init`, "
                "or run a command directly: tau run -- python train.py)"
            )
        loaded = load_spec(path, overrides)

    if output != "json":
        for note in inactive_fields(loaded.spec, "local"):
            click.echo(f"note: {note}", err=True)
    client = connect()
    digest = upload_snapshot(client, loaded.workdir, list(loaded.spec.exclude))
    payload: dict[str, Any] = {
        "spec_source": loaded.source,
        "file_text": loaded.file_text,
        "overrides": loaded.overrides,
        "resolved": loaded.resolved,
        "spec_hash": loaded.spec_hash,
        "snapshot_digest": digest,
        "submitter": getpass.getuser(),
        "env": submitter_env(os.environ),
    }
    result = client.submit(payload, idempotency_key or str(uuid.uuid4()))
    run = result["run"]
    if output == "json" and not (wait or follow):
        emit_json(result)
        return
    if output != "json":
        verb = "submitted" if result["created"] else "already submitted"
        click.echo(f"run {run['id']} {verb} ({run['state']})", err=wait or follow)
    if follow:
        final = follow_logs(client, run["id"])
    elif wait:
        final = wait_for(client, run["id"], show=output != "json")
    else:
        click.echo(f"  tau status {run['id']}    tau logs {run['id']} -f")
        return
    if output == "json":
        emit_json(final)
    ctx.exit(exit_code_of(final))


def upload_snapshot(client: Any, workdir: Path, exclude: list[str]) -> str:
    """Archive the workdir (content-addressed) and upload it unless the server has it."""
    from taugrid.executors.local.snapshot import DEFAULT_MAX_BYTES, create_snapshot

    limit = int(os.environ.get("TAU_SNAPSHOT_LIMIT", DEFAULT_MAX_BYTES))
    info = create_snapshot(workdir, exclude, tau_home() / "cache" / "snapshots", limit)
    if not client.has_snapshot(info.digest):
        client.put_snapshot(info.digest, info.path.read_bytes())
    return info.digest
