"""Entry point of ``tau``.

Start-up time is a feature: ``tau --help`` runs on every look at the CLI, so it is
answered from the command table without importing click (see fasthelp); every other
call loads click and then only the module of the command that runs.
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    if sys.argv[1:] in ([], ["--help"], ["-h"]):
        from taugrid.cli.fasthelp import render

        sys.stdout.write(render())
        return
    debug = "--debug" in sys.argv[1:] or bool(os.environ.get("TAU_DEBUG"))
    import click

    from taugrid.cli.app import cli

    try:
        # Without standalone mode click returns ctx.exit()'s code instead of exiting.
        rc = cli.main(prog_name="tau", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.Abort:
        click.echo("tau: aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(2 if isinstance(exc, click.UsageError) else exc.exit_code)
    except Exception as exc:
        from taugrid.errors import SpecError, TauError

        if debug:
            raise
        if isinstance(exc, SpecError):  # compiler style: one file:line:col line per problem
            click.echo(exc.message, err=True)
            sys.exit(exc.exit_code)
        if isinstance(exc, TauError):
            click.echo(f"tau: {exc.message}", err=True)
            sys.exit(exc.exit_code)
        click.echo(
            f"tau: internal error: {type(exc).__name__}: {exc} (rerun with --debug)", err=True
        )
        sys.exit(1)
    sys.exit(rc if isinstance(rc, int) else 0)


if __name__ == "__main__":
    main()
