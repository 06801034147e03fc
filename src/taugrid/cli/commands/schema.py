"""Print the JSON Schema of tau.yaml.

Point your editor at it for completion and checks while writing tau.yaml.
"""

from __future__ import annotations

import click

from taugrid.cli.output import emit_json


@click.command(name="schema", help=__doc__)
def command() -> None:
    from taugrid.spec import json_schema

    emit_json(json_schema())
