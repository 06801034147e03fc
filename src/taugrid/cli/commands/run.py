"""Submit a run from tau.yaml or a command line.

\b
  tau run                      submit ./tau.yaml
  tau run train.yaml --wait    submit, watch, exit with the run's exit code
  tau run -- python train.py   no file: run this command from the current directory
  tau run --set resources.gpus=2 --set env.LR=1e-3
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from taugrid.cli.connect import connect, default_workspace
from taugrid.cli.preflight import check_submission, submission_body
from taugrid.cli.progress import SubmitProgress
from taugrid.cli.records import Capture
from taugrid.cli.runflags import RunFlags, blamed_on_flags, finish_submit, run_flags
from taugrid.errors import SnapshotTooLarge, SpecError, SpecProblem, UsageError
from taugrid.home import tau_home

if TYPE_CHECKING:
    from taugrid.spec import LoadedSpec


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
@run_flags
@click.option(
    "--idempotency-key",
    help="Submit at most once for this key in the workspace (for CI retries); the same key "
    "with another spec or code is refused.",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print, as a YAML stream, the Kubernetes objects a cluster server would create "
    "for the run's first attempt; nothing is uploaded or recorded.",
)
@click.pass_context
def command(
    ctx: click.Context,
    file: Path | None,
    idempotency_key: str | None,
    dry_run: bool,
    flags: RunFlags,
) -> None:
    from taugrid.spec import inactive_fields, load_spec, spec_from_command

    overrides = flags.overrides()
    argv: list[str] | None = ctx.meta.get("tau.argv")
    if argv is not None:
        if file is not None:
            raise UsageError("give either a spec FILE or a command after --, not both")
        if not argv:
            raise UsageError("nothing after --: give the command to run")
    else:
        path = file or Path("tau.yaml")
        if not path.exists():
            raise UsageError(
                f"{path}: no such file (write one with `tau init`, "
                "or run a command directly: tau run -- python train.py)"
            )

    def load(extra: list[str]) -> LoadedSpec:
        with blamed_on_flags(flags):  # `--name My_Run: ...`, not `--set name=My_Run: ...`
            if argv is not None:
                return spec_from_command(argv, Path.cwd(), overrides + extra)
            return load_spec(path, overrides + extra)

    loaded = load([])
    # The context's workspace applies where neither the file nor a flag chose one.
    context_ws = default_workspace()
    if context_ws and "workspace" not in loaded.spec.model_fields_set:
        loaded = load([f"workspace={context_ws}"])

    check_limits(loaded)  # what the server would refuse, before anything is archived
    # git and the workload's Python are looked at while the snapshot is built and sent.
    records = Capture(loaded.workdir, workload_path(loaded.spec.env))
    client = connect()
    # A missing secret or queue, or what the server's mode refuses (spec/modes.py), before
    # any archiving; the answer carries the mode's capabilities, for the notes.
    checked = check_submission(client, loaded)
    if flags.output != "json":
        from taugrid.cli.servermode import from_check

        for note in inactive_fields(loaded.spec, from_check(checked)):
            click.echo(f"note: {note}", err=True)
    if dry_run:
        show_dry_run(client, loaded)
        return
    digest = upload_snapshot(
        client,
        loaded.workdir,
        list(loaded.spec.exclude),
        loaded.spec.workspace,
        SubmitProgress.for_output(flags.output),
    )
    code, python_env = records.result()
    payload: dict[str, Any] = {
        **submission_body(loaded),
        "snapshot_digest": digest,
        "code": code,
        "python_env": python_env,
    }
    result = client.submit(payload, idempotency_key or str(uuid.uuid4()))
    finish_submit(ctx, client, result, flags)


def workload_path(spec_env: Mapping[str, str]) -> str | None:
    """The PATH the workload will search: the spec's ``env.PATH`` (what is left of
    ``${VAR}`` in it filled from this shell, as at launch), else this shell's."""
    if "PATH" not in spec_env:
        return None
    from taugrid.spec import expand_at_launch

    return expand_at_launch([spec_env["PATH"]], os.environ)[0]


def check_limits(loaded: LoadedSpec) -> None:
    """The server's submission limits (taugrid.domain.submit_limits) on the spec."""
    from taugrid.domain.submit_limits import submission_problems

    problems = submission_problems(
        resolved=loaded.resolved,
        spec_source=loaded.source,
        file_text=loaded.file_text,
        overrides=loaded.overrides,
    )
    if problems:
        raise SpecError([SpecProblem(loaded.source, None, None, f, m) for f, m in problems])


def show_dry_run(client: Any, loaded: LoadedSpec) -> None:
    """The objects the server's executor would create, with the real snapshot digest
    (archived here, not uploaded)."""
    import sys

    from taugrid.policy import to_yaml
    from taugrid.workdir.snapshot import DEFAULT_MAX_BYTES, create_snapshot

    limit = int(os.environ.get("TAU_SNAPSHOT_LIMIT", DEFAULT_MAX_BYTES))
    cache = tau_home() / "cache" / "snapshots"
    info = create_snapshot(loaded.workdir, list(loaded.spec.exclude), cache, limit, None)
    body = {**submission_body(loaded), "snapshot_digest": info.digest}
    answer = client.call("POST", "/runs/dry-run", json_body=body)
    sys.stdout.write(to_yaml(answer["objects"]))


def upload_snapshot(
    client: Any,
    workdir: Path,
    exclude: list[str],
    workspace: str,
    progress: SubmitProgress | None = None,
) -> str:
    """Archive the workdir (content-addressed) and upload it for ``workspace``, streamed
    from the archive file, unless the server has it there already. ``progress`` shows
    both on a terminal (taugrid.cli.progress)."""
    from taugrid.workdir.snapshot import DEFAULT_MAX_BYTES, create_snapshot

    progress = progress or SubmitProgress(enabled=False)
    limit = int(os.environ.get("TAU_SNAPSHOT_LIMIT", DEFAULT_MAX_BYTES))
    try:
        drawn = progress.archiving if progress.enabled else None
        info = create_snapshot(workdir, exclude, tau_home() / "cache" / "snapshots", limit, drawn)
        progress.archived()
        if info.size_bytes > limit:  # compressed yet bigger: incompressible files, headers
            raise SnapshotTooLarge(
                f"code snapshot archive of {workdir} is {info.size_bytes / 2**20:.1f} MiB, "
                f"over the {limit / 2**20:.1f} MiB limit; exclude what the run does not need "
                "with `exclude:` in tau.yaml or a .tauignore file (gitignore syntax)"
            )
        if not client.has_snapshot(info.digest, workspace):
            client.put_snapshot(
                info.digest, info.path, workspace, progress.uploader(info.size_bytes)
            )
            progress.uploaded()
    except BaseException:
        progress.abandon()
        raise
    progress.finish(info.content_bytes, info.file_count, info.size_bytes)
    return info.digest
