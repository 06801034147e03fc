"""Print the Kubernetes objects a run would create.

A YAML stream of what a run of FILE creates on a cluster. No server and no cluster
are needed: the objects of the run's first attempt under the policy in --policy, or
the built-in default policy. The code snapshot's digest is the real one of the
workdir; the run id's random part and the code token are placeholders (a server issues
them at submit). Whatever a cluster would refuse is refused here, with nothing created.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import click


@click.command(name="render", help=__doc__)
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path), default="tau.yaml")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a field.")
@click.option(
    "--policy",
    "policy_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The platform's policy.yaml (default: the built-in policy).",
)
@click.option("--workspace", metavar="W", help="Render for workspace W (default: the spec's).")
@click.option(
    "--namespace-prefix",
    default="",
    metavar="P",
    help="Prefix of each workspace's namespace (namespace = P + workspace).",
)
@click.option(
    "--server-url",
    metavar="URL",
    help="Where pods fetch the code from (default: the in-cluster service of the chart).",
)
def command(
    file: Path,
    sets: tuple[str, ...],
    policy_file: Path | None,
    workspace: str | None,
    namespace_prefix: str,
    server_url: str | None,
) -> None:
    from taugrid.domain.runid import SUFFIX_LEN
    from taugrid.errors import UsageError
    from taugrid.manifests.plan import (
        DEFAULT_SERVER_URL,
        AttemptIdentity,
        ClusterTarget,
        attempt_input,
        check_submit,
        place,
        render_attempt,
    )
    from taugrid.policy import load_policy, to_yaml
    from taugrid.policy.defaults import default_policy
    from taugrid.spec import load_spec, refusal
    from taugrid.spec.modes import CLUSTER
    from taugrid.workdir.snapshot import create_snapshot

    loaded = load_spec(file, [*sets, *([f"workspace={workspace}"] if workspace else [])])
    spec = loaded.spec
    if (refused := refusal(spec, CLUSTER)) is not None:
        raise UsageError(refused)
    if policy_file is not None:
        policy = load_policy(policy_file).policy
    else:  # quotas do not shape the objects: Kueue admits against the applied policy
        policy = default_policy(0, None, 0, 0, workspaces=[spec.workspace])
    target = ClusterTarget(
        namespace_prefix=namespace_prefix, server_url=server_url or DEFAULT_SERVER_URL
    )
    check_submit(spec, policy, target)  # every attempt's refusals before the snapshot
    with tempfile.TemporaryDirectory(prefix="tau-render-") as tmp:
        digest = create_snapshot(loaded.workdir, spec.exclude, Path(tmp)).digest
    run_id = f"{spec.name}-{'x' * SUFFIX_LEN}"
    inp = attempt_input(
        spec, AttemptIdentity(run_id, 0, digest), place(spec, policy, target), target
    )
    sys.stdout.write(
        f"# attempt 0 of run {run_id} ({file}); the server issues the run id and the code token\n"
    )
    sys.stdout.write(to_yaml(render_attempt(inp)))
