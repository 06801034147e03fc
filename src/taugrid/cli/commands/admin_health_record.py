"""``tau admin health record FILE``: real NVML readings of this machine's GPUs saved as JSON
lines, for fixtures (``taugrid.health.record``). It reads NVML directly, with no server."""

from __future__ import annotations

from pathlib import Path

import click


@click.command(name="record", help="Save this machine's NVML readings as JSONL fixtures.")
@click.argument("file", type=click.Path(dir_okay=False, writable=True, path_type=Path))
@click.option(
    "--seconds",
    type=click.FloatRange(min=0),
    default=60.0,
    show_default=True,
    help="How long to record.",
)
@click.option(
    "--interval",
    type=click.FloatRange(min=0.1),
    default=15.0,
    show_default=True,
    help="Seconds between polls.",
)
def record(file: Path, seconds: float, interval: float) -> None:
    from taugrid.health.record import close_nvml, open_nvml
    from taugrid.health.record import record as record_nvml

    nvml = open_nvml()  # NvmlUnavailable (no library, driver or GPU): the CLI says why
    try:
        with file.open("w") as out:
            polls = record_nvml(out, nvml, seconds=seconds, interval=interval)
    finally:
        close_nvml(nvml)
    click.echo(f"recorded {polls} poll(s) to {file}")


COMMANDS: tuple[click.Command, ...] = (record,)
