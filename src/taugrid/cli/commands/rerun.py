"""Submit a run again from its record, with more overrides.

\b
  tau rerun RUN                           same snapshot, spec and overrides, a new run id
  tau rerun RUN --set env.LR=0.1 --wait   the recorded overrides, then this one
  tau rerun RUN --name lr-0-1 --gpus 2

The code is the run's recorded snapshot, not the current directory; the spec is its
recorded spec file resolved again with the recorded overrides followed by the new ones.
The new run records which run it reruns.
"""

from __future__ import annotations

import uuid

import click

from taugrid.cli.connect import connect
from taugrid.cli.runflags import RunFlags, blamed_on_flags, finish_submit, run_flags
from taugrid.osuser import current_user


@click.command(name="rerun", help=__doc__)
@click.argument("run")
@run_flags
@click.pass_context
def command(ctx: click.Context, run: str, flags: RunFlags) -> None:
    from taugrid.spec.rerun import rerun_payload

    client = connect()
    record = client.get_run(run)
    # A bad --set (or --name, ...) stops here (SpecError, exit 2): nothing is created.
    with blamed_on_flags(flags):
        payload = rerun_payload(record, flags.overrides(), current_user())
    result = client.submit(payload, str(uuid.uuid4()))
    finish_submit(ctx, client, result, flags, note=f" as a rerun of {record['id']}")
