"""The flags ``tau run`` and ``tau rerun`` share, and what happens after a submit.

``@run_flags`` adds ``--set``, ``--name``, ``--workspace``, ``--queue``, ``--priority``, ``--gpus``,
``--wait``, ``--follow``, ``--detach`` and ``-o`` and hands the command one
:class:`RunFlags` as ``flags``; :func:`finish_submit` prints the answer and, with
``--wait``/``--follow``, watches the run and exits with its exit code.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from typing import Any

import click

from taugrid.cli.client import Client
from taugrid.cli.output import emit_json, output_option
from taugrid.cli.watch import Watch, exit_code_of
from taugrid.errors import SpecError, UsageError

# Where a --set override's problems are reported (taugrid.spec.overrides.OVERRIDE_FILE;
# not imported: that loads pydantic, which `tau resume` does without).
OVERRIDE_FILE = "--set"

# The shorthand flags and the field each one sets, in the order they are applied.
_SHORTHANDS = (
    ("name", "name"),
    ("workspace", "workspace"),
    ("queue", "queue"),
    ("priority", "priority"),
    ("gpus", "resources.gpus"),
)


@dataclass(frozen=True)
class RunFlags:
    sets: tuple[str, ...] = ()
    name: str | None = None
    workspace: str | None = None
    queue: str | None = None
    priority: str | None = None
    gpus: int | None = None
    wait: bool = False
    follow: bool = False
    detach: bool = False
    output: str = "table"

    def _shorthands(self) -> list[tuple[str, str, object]]:
        """(flag, field, value) of each shorthand flag given."""
        given = [(flag, key, getattr(self, flag)) for flag, key in _SHORTHANDS]
        return [(flag, key, value) for flag, key, value in given if value is not None]

    def overrides(self) -> list[str]:
        """``--set`` texts, then the shorthand flags as the ``--set`` they stand for (what
        the record keeps)."""
        return [*self.sets, *(f"{key}={value}" for _, key, value in self._shorthands())]

    def flag_sources(self) -> dict[str, str]:
        """Where a problem of a shorthand's override is reported: ``--set name=My_Run``
        (the override it stands for) -> ``--name My_Run`` (what the user typed)."""
        import shlex  # only on the error path

        return {
            f"{OVERRIDE_FILE} {key}={value}": f"--{flag} {shlex.quote(str(value))}"
            for flag, key, value in self._shorthands()
        }

    @property
    def watching(self) -> bool:
        return self.wait or self.follow


_NAMES = tuple(f.name for f in fields(RunFlags))

# Top to bottom as --help lists them.
_OPTIONS = (
    click.option(
        "--set",
        "sets",
        multiple=True,
        metavar="KEY=VALUE",
        help="Override any field (dotted path); repeatable.",
    ),
    click.option("--name", help="Run name (overrides the spec)."),
    click.option("--workspace", help="Workspace to submit to (overrides the spec)."),
    click.option("--queue", help="Queue to submit to."),
    click.option("--priority", help="Priority class."),
    click.option("--gpus", type=int, help="GPUs per node."),
    click.option("--wait", is_flag=True, help="Block until the run ends; exit with its exit code."),
    click.option("-f", "--follow", is_flag=True, help="Stream the run's logs until it ends."),
    click.option("--detach", is_flag=True, help="Return once submitted (the default)."),
    output_option,
)


def run_flags(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add the shared run flags; the command receives them as ``flags: RunFlags``."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        flags = RunFlags(**{name: kwargs.pop(name) for name in _NAMES})
        if flags.detach and flags.watching:
            raise UsageError("--detach cannot be combined with --wait or --follow")
        return func(*args, flags=flags, **kwargs)

    decorated: Callable[..., Any] = wrapper
    for option in reversed(_OPTIONS):
        decorated = option(decorated)
    return decorated


@contextmanager
def blamed_on_flags(flags: RunFlags) -> Iterator[None]:
    """A spec problem caused by ``--name``/``--workspace``/``--queue``/``--priority``/
    ``--gpus`` names that flag as typed, not the ``--set`` it stands for."""
    try:
        yield
    except SpecError as exc:
        sources = flags.flag_sources()
        if not any(p.file in sources for p in exc.problems):
            raise
        problems = [replace(p, file=sources.get(p.file, p.file)) for p in exc.problems]
        raise SpecError(problems) from None


def finish_submit(
    ctx: click.Context, client: Client, result: dict[str, Any], flags: RunFlags, note: str = ""
) -> None:
    """Report a submit answer (``{"run", "created", "warnings"}``); then watch it if asked
    to. The server's warnings go to stderr, one ``warning:`` line each, also with ``-o
    json`` (whose stdout stays the answer alone)."""
    for warning in result.get("warnings") or ():
        click.echo(f"warning: {warning}", err=True)
    run = result["run"]
    if flags.output == "json" and not flags.watching:
        emit_json(result)
        return
    if flags.output != "json":
        verb = "submitted" if result["created"] else "already submitted"
        click.echo(f"run {run['id']} {verb}{note} ({run['state']})", err=flags.watching)
    final = watch(client, run["id"], flags)
    if final is not None:
        ctx.exit(exit_code_of(final))


def watch(
    client: Client, run_id: str, flags: RunFlags, *, since: float | None = None
) -> dict[str, Any] | None:
    """``--follow`` streams the logs, ``--wait`` shows progress; either returns the final
    run detail (printed with ``-o json``) for the caller to exit with its code. Without
    either, prints where to look next and returns ``None``. Ctrl-C leaves the run going
    (see :meth:`Watch.interrupted`) and exits 130."""
    if not flags.watching:
        if flags.output != "json":
            click.echo(f"  tau status {run_id}    tau logs {run_id} -f")
        return None
    watcher = Watch(client, run_id, show=flags.output != "json")
    try:
        final = watcher.follow(since=since) if flags.follow else watcher.wait(since=since)
    except KeyboardInterrupt:
        raise click.exceptions.Exit(watcher.interrupted()) from None
    if flags.output == "json":
        emit_json(final)
    return final
