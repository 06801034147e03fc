"""``tau admin cluster check``: is the cluster ready for TauGrid? The report a platform
team runs after installing the Helm chart (docs/kubernetes.md).

The server does the checking (``GET /api/v1/admin/cluster/check``: it holds the cluster's
credentials, the policy in force and the agents' last reports); this prints one line per
check, ``ok``, ``warn`` or ``FAIL`` with what is wrong and how to fix it, then a summary,
and exits 11 (``cluster_not_ready``) when a check failed. ``-o json``: the answer as is.
"""

from __future__ import annotations

from typing import Any

import click

from taugrid.cli.connect import connect
from taugrid.cli.output import emit_json, output_option
from taugrid.errors import ClusterNotReady

MARKS = {"ok": "ok  ", "warn": "warn", "fail": "FAIL"}


@click.group(name="cluster", help="The cluster TauGrid runs on: readiness checks.")
def cluster() -> None:
    pass


def check_lines(checks: list[dict[str, Any]]) -> list[str]:
    """One line per check: its mark, its name (and subject), what was found, the fix."""
    lines = []
    for c in checks:
        label = f"{c['check']} {c['subject']}" if c.get("subject") else c["check"]
        line = f"{MARKS.get(c['status'], c['status'])}  {label}: {c['message']}"
        if c.get("fix") and c["status"] != "ok":
            line += f"; fix: {c['fix']}"
        lines.append(line)
    return lines


@cluster.command(
    name="check",
    help="Check that the cluster is ready: Kubernetes, Kueue and KubeRay versions, CRDs and "
    "webhooks, the policy's queues, the flavors' nodes, the GPU nodes' health agents. "
    "Exits non-zero when it is not.",
)
@output_option
def check(output: str) -> None:
    data = connect().call("GET", "/admin/cluster/check", timeout=120.0)
    if output == "json":
        emit_json(data)
    else:
        for line in check_lines(data["checks"]):
            click.echo(line)
    if not data["ready"]:
        raise ClusterNotReady(data["summary"])
    if output != "json":
        click.echo(data["summary"])


COMMANDS: tuple[click.Command, ...] = (cluster,)
