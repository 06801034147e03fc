"""Platform administration: policy, workspaces, users, tokens, audit.

The policy file (policy.yaml) is the platform team's: flavors, cohorts, cluster queues,
workspaces, priority classes and per-user limits (docs/policy.md). Identity and access:
workspaces and their members' roles, users and service accounts, API tokens and the
audit log (docs/access.md). GPU health: the monitor's events, returning a GPU to
service, fault injection (docs/gpu-health.md). The cluster: readiness checks
(docs/kubernetes.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from taugrid.cli.commands import admin_cluster, admin_health, admin_identity
from taugrid.cli.connect import connect
from taugrid.cli.output import emit_json, output_option
from taugrid.errors import UsageError

if TYPE_CHECKING:
    from taugrid.policy import Policy


@click.group(name="admin", help=__doc__)
def command() -> None:
    pass


# workspace ... audit, health, cluster
for _sub in (*admin_identity.COMMANDS, *admin_health.COMMANDS, *admin_cluster.COMMANDS):
    command.add_command(_sub)


@command.group(name="policy", help="Check, render and manage the platform policy (policy.yaml).")
def policy() -> None:
    pass


def summary(policy: Policy) -> list[str]:
    """One line per kind of thing the policy declares."""
    flavors = [f"{f.name} ({f.gpu_type})" if f.gpu_type else f.name for f in policy.flavors]
    queues = [f"{q.name} [{q.cohort}]" if q.cohort else q.name for q in policy.cluster_queues]
    priorities = [
        f"{p.name}={p.value}" + (" (default)" if p.default else "")
        for p in sorted(policy.priority_classes, key=lambda p: p.value)
    ]
    workspaces = [
        f"{ws.name}: " + ", ".join(f"{lq.name}->{lq.cluster_queue}" for lq in ws.local_queues)
        for ws in policy.workspaces
    ]
    rows = [
        ("flavors", flavors),
        ("cluster queues", queues),
        ("cohorts", [c.name for c in policy.cohorts]),
        ("priorities", priorities),
        ("workspaces", workspaces),
    ]
    return [f"  {name} ({len(items)}): {'; '.join(items) or '-'}" for name, items in rows]


@policy.command(name="validate", help="Check a policy.yaml and summarise what it declares.")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
def validate(file: Path) -> None:
    from taugrid.policy import load_policy

    loaded = load_policy(file)  # SpecError: one file:line:col line per problem, exit 2
    click.echo(f"{file}: valid (policy hash {loaded.policy_hash[:12]})")
    for line in summary(loaded.policy):
        click.echo(line)


@policy.command(
    name="render",
    help="Print the Kueue v1beta2 objects (and Namespaces) as YAML: of FILE, or without "
    "one of the policy in force on the server (the built-in default included).",
)
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path), required=False)
@click.option(
    "--namespace-prefix",
    default="",
    metavar="P",
    help="Prefix of each workspace's namespace (namespace = P + workspace).",
)
def render(file: Path | None, namespace_prefix: str) -> None:
    """Without FILE, renders the policy in force on the server, the built-in default too
    (the server sends it written as policy.yaml: this machine's GPUs, CPUs and memory)."""
    from taugrid.policy import load_policy, load_policy_text, render_kueue, to_yaml

    if file is not None:
        loaded = load_policy(file)
    else:
        current = connect().call("GET", "/admin/policy")
        if current.get("text") is None:  # a server of before the built-in had a text
            raise UsageError("the server runs the built-in default policy; give a FILE to render")
        loaded = load_policy_text(current["text"], current["source"])
    click.echo(to_yaml(render_kueue(loaded.policy, namespace_prefix)), nl=False)


@policy.command(
    name="apply",
    help="Check a policy.yaml and put it in force on the server (and on its cluster, when "
    "it has one: nothing is stored unless every object was applied).",
)
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@output_option
def apply(file: Path, output: str) -> None:
    from taugrid.policy import load_policy

    load_policy(file)  # every problem with its position, before anything is sent
    data = connect().call(
        "PUT", "/admin/policy", json_body={"source": str(file), "text": file.read_text()}
    )
    if output == "json":
        emit_json(data)
        return
    click.echo(
        f"policy from {file} in force (hash {data['hash'][:12]}): "
        f"{len(data['cluster_queues'])} cluster queue(s), "
        f"{len(data['local_queues'])} local queue(s)"
    )
    for line in cluster_lines(data.get("cluster")):
        click.echo(line)


def cluster_lines(cluster: dict[str, Any] | None) -> list[str]:
    """What applying did on the cluster: the drift found before, one line per kind applied."""
    if cluster is None:  # local mode, or a server of before clusters
        return []
    lines = ["drift before applying:"]
    lines += [f"  {line}" for line in drift_lines(cluster["drift_before"])]
    lines.append("applied to the cluster (server-side apply):")
    lines += [f"  {kind}: {n}" for kind, n in cluster["counts"].items()] or ["  nothing"]
    return lines


def drift_lines(drift: list[dict[str, Any]]) -> list[str]:
    """Drift in words: missing objects counted per kind (on a first apply that is all of
    them), every changed or left-over object on a line of its own."""
    if not drift:
        return ["no drift"]
    missing: dict[str, int] = {}
    for d in drift:
        if d["state"] == "missing":
            missing[d["kind"]] = missing.get(d["kind"], 0) + 1
    lines = []
    if missing:
        counted = ", ".join(f"{n} {kind}" for kind, n in missing.items())
        lines.append(f"missing from the cluster: {counted}")
    lines += [f"{d['object']}: {d['what']}" for d in drift if d["state"] != "missing"]
    return lines


@policy.command(
    name="drift",
    help="Show how the cluster's Kueue objects and Namespaces differ from the policy in force.",
)
@output_option
def drift(output: str) -> None:
    data = connect().call("GET", "/admin/policy/drift")
    if output == "json":
        emit_json(data)
    elif not data["cluster"]:
        click.echo("no cluster: this server runs in local mode (the policy is in force here only)")
    else:
        for line in drift_lines(data["drift"]):
            click.echo(line)


@policy.command(name="show", help="Print the policy in force on the server.")
@output_option
def show(output: str) -> None:
    data = connect().call("GET", "/admin/policy")
    if output == "json":
        emit_json(data)
        return
    if data["builtin"] and data.get("text"):
        click.echo(data["text"], nl=False)  # the built-in written as policy.yaml
        return
    if data["builtin"]:
        click.echo("# built-in default policy (no policy applied)")
    else:
        click.echo(f"# {data['source']}, applied by {data['applied_by']}, hash {data['hash'][:12]}")
        click.echo(data["text"], nl=False)
        return
    prios = ", ".join(f"{k}={v}" for k, v in data["priorities"].items())
    click.echo(f"# cluster queues: {', '.join(data['cluster_queues'])}")
    click.echo(f"# local queues: {', '.join(data['local_queues'])}")
    click.echo(f"# priorities: {prios} (default {data['default_priority']})")
