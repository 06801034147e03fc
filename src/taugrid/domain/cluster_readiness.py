"""Whether a cluster is ready for TauGrid, in lines a platform team acts on: the verdict
of ``tau admin cluster check``. Pure: plain facts in (``domain.cluster_facts``), checks
out, no I/O.

Each check is ``ok``, ``warn`` (worth knowing, not a reason to wait) or ``fail`` (runs
would not work: not ready), and every line that is not ok says how to fix it. The
supported versions are the ones TauGrid is built and tested against
(``shared/reference/kueue-kuberay-contract.md``): Kubernetes 1.30 or newer, Kueue 0.19.x
serving ``kueue.x-k8s.io/v1beta2``, KubeRay 1.7.x serving ``ray.io/v1``.

The per-node checks (flavors, GPU nodes, health agents) are in
``domain.cluster_readiness_nodes``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from taugrid.domain.cluster_facts import (
    AgentReports,
    ClusterFacts,
    Controller,
    DriftItem,
    KubeVersion,
    PolicyFacts,
    Webhook,
)
from taugrid.domain.cluster_readiness_nodes import agent_checks, flavor_checks, gpu_node_check
from taugrid.domain.cluster_readiness_types import FAIL, OK, WARN, Check, listed

__all__ = [
    "FAIL",
    "OK",
    "WARN",
    "Addon",
    "Check",
    "check_cluster",
    "ready",
    "summary",
]

MIN_KUBERNETES = (1, 30)
_VERSION = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?")
_DIGITS = re.compile(r"\d+")


@dataclass(frozen=True)
class Addon:
    """A cluster add-on TauGrid needs: its API group and version, the CRDs it must
    serve, how its controller's Deployment is recognised, and how to install it."""

    key: str  # check names: "kueue" -> kueue-api, kueue-crds, ...
    title: str
    group: str
    api_version: str
    series: tuple[int, int]  # supported minor series (0, 19) = 0.19.x
    crds: tuple[str, ...]  # plurals
    image_words: tuple[str, ...]  # an image repository or Deployment name with one of these
    install: str  # "Kueue v0.19.2 (the command that installs it)"
    webhooks_required: bool

    @property
    def series_text(self) -> str:
        return f"{self.series[0]}.{self.series[1]}.x"


KUEUE = Addon(
    key="kueue",
    title="Kueue",
    group="kueue.x-k8s.io",
    api_version="v1beta2",
    series=(0, 19),
    crds=(
        "clusterqueues",
        "localqueues",
        "workloads",
        "resourceflavors",
        "cohorts",
        "workloadpriorityclasses",
    ),
    image_words=("kueue",),
    install=(
        "Kueue v0.19.2 (kubectl apply --server-side -f https://github.com/"
        "kubernetes-sigs/kueue/releases/download/v0.19.2/manifests.yaml)"
    ),
    webhooks_required=True,  # its mutating webhook suspends new Jobs for admission
)
KUBERAY = Addon(
    key="kuberay",
    title="KubeRay",
    group="ray.io",
    api_version="v1",
    series=(1, 7),
    crds=("rayjobs", "rayclusters"),
    image_words=("kuberay",),
    install=(
        "KubeRay v1.7.0 (helm upgrade --install kuberay-operator "
        "kuberay/kuberay-operator --version 1.7.0 --namespace kuberay-system "
        "--create-namespace)"
    ),
    webhooks_required=False,  # KubeRay's chart leaves its webhook off
)
ADDONS = (KUEUE, KUBERAY)


def check_cluster(
    cluster: ClusterFacts, policy: PolicyFacts, agents: AgentReports, *, now: float
) -> list[Check]:
    """Every check, in the order a platform team fixes things: the cluster, the add-ons,
    the policy's objects, the nodes, the agents, the policy file."""
    checks = [kubernetes_check(cluster)]
    for addon in ADDONS:
        checks += addon_checks(addon, cluster)
    checks += policy_object_checks(policy)
    checks += flavor_checks(cluster, policy)
    checks.append(gpu_node_check(cluster, policy))
    checks += agent_checks(cluster, agents, now=now)
    if policy.policy_file is not None:
        checks.append(policy_file_check(policy))
    return checks


def ready(checks: Sequence[Check]) -> bool:
    return not any(c.status == FAIL for c in checks)


def summary(checks: Sequence[Check]) -> str:
    """One line: ready or not, and which checks failed."""
    failed = [c.label for c in checks if c.status == FAIL]
    warned = sum(1 for c in checks if c.status == WARN)
    warnings = f", {warned} warning(s)" if warned else ""
    if failed:
        return (
            f"cluster not ready: {len(failed)} of {len(checks)} checks failed "
            f"({listed(failed)}){warnings}"
        )
    return f"cluster ready: {len(checks) - warned} of {len(checks)} checks ok{warnings}"


# -- Kubernetes itself ----------------------------------------------------------------------
def kubernetes_check(cluster: ClusterFacts) -> Check:
    name = "kubernetes"
    v = cluster.version
    if v is None:
        return Check(
            name,
            FAIL,
            f"cannot read the API server's version: {cluster.errors.get('version', 'no answer')}",
            "check the server's Kubernetes credentials and that it reaches the API server",
        )
    found = _major_minor(v)
    shown = v.git_version or f"{v.major}.{v.minor}"
    want = f"{MIN_KUBERNETES[0]}.{MIN_KUBERNETES[1]}"
    if found is None:
        return Check(
            name,
            WARN,
            f"Kubernetes version {shown!r} not understood (TauGrid supports {want} or newer)",
            "check it yourself: kubectl version",
        )
    if found < MIN_KUBERNETES:
        return Check(
            name,
            FAIL,
            f"Kubernetes {shown} is older than {want}",
            f"upgrade the cluster to Kubernetes {want} or newer",
        )
    return Check(name, OK, f"Kubernetes {shown} ({want} or newer)")


def _major_minor(v: KubeVersion) -> tuple[int, int] | None:
    major, minor = _DIGITS.match(v.major or ""), _DIGITS.match(v.minor or "")
    if major and minor:
        return int(major[0]), int(minor[0])
    m = _VERSION.search(v.git_version or "")
    return (int(m[1]), int(m[2])) if m else None


# -- the add-ons --------------------------------------------------------------------------
def addon_checks(addon: Addon, cluster: ClusterFacts) -> list[Check]:
    return [
        _api_check(addon, cluster),
        _crd_check(addon, cluster),
        _webhook_check(addon, cluster),
        _controller_check(addon, cluster),
    ]


def _api_check(addon: Addon, cluster: ClusterFacts) -> Check:
    name = f"{addon.key}-api"
    gv = f"{addon.group}/{addon.api_version}"
    if cluster.api_groups is None:
        why = cluster.errors.get("api_groups", "no answer")
        return Check(
            name, FAIL, f"cannot read the API discovery: {why}", "check the server's credentials"
        )
    versions = cluster.api_groups.get(addon.group)
    if versions is None:
        return Check(
            name,
            FAIL,
            f"API group {addon.group} is not served: {addon.title} is not installed",
            f"install {addon.install}",
        )
    if addon.api_version not in versions:
        return Check(
            name,
            FAIL,
            f"{addon.group} serves {listed(versions)}, not {addon.api_version}: "
            f"{addon.title} is older than {addon.series_text}",
            f"upgrade to {addon.install}",
        )
    return Check(name, OK, f"{gv} is served")


def _crd_check(addon: Addon, cluster: ClusterFacts) -> Check:
    name = f"{addon.key}-crds"
    if cluster.crds is None:
        why = cluster.errors.get("crds", "no answer")
        return Check(
            name,
            FAIL,
            f"cannot read the CustomResourceDefinitions: {why}",
            "let the server's ServiceAccount get and list customresourcedefinitions "
            "(apiextensions.k8s.io)",
        )
    found = {c.name: c for c in cluster.crds}
    wanted = [f"{plural}.{addon.group}" for plural in addon.crds]
    missing = [n for n in wanted if n not in found]
    stale = [n for n in wanted if n in found and addon.api_version not in found[n].served]
    if missing:
        return Check(
            name,
            FAIL,
            f"CRD {listed(missing)} missing",
            f"reinstall {addon.install}",
        )
    if stale:
        serves = {n: listed(found[n].served) for n in stale}
        words = "; ".join(f"{n} serves {v}" for n, v in serves.items())
        return Check(
            name,
            FAIL,
            f"CRD {listed(stale)} does not serve {addon.api_version} ({words})",
            f"upgrade to {addon.install}",
        )
    plurals = ", ".join(addon.crds)
    return Check(name, OK, f"{len(wanted)} CRDs serve {addon.api_version} ({plurals})")


def _mentions(text: str, words: Sequence[str]) -> bool:
    low = text.lower()
    return any(w in low for w in words)


def addon_webhooks(addon: Addon, webhooks: Sequence[Webhook]) -> list[Webhook]:
    """The webhook configurations of ``addon``: named after it, or calling a service
    that is."""
    words = addon.image_words
    return [
        w
        for w in webhooks
        if _mentions(w.name, words) or any(_mentions(s, words) for s in w.services)
    ]


def _webhook_check(addon: Addon, cluster: ClusterFacts) -> Check:
    name = f"{addon.key}-webhooks"
    if cluster.webhooks is None:
        why = cluster.errors.get("webhooks", "no answer")
        status = FAIL if addon.webhooks_required else WARN
        return Check(
            name,
            status,
            f"cannot read the admission webhook configurations: {why}",
            "let the server's ServiceAccount get and list mutatingwebhookconfigurations and "
            "validatingwebhookconfigurations (admissionregistration.k8s.io)",
        )
    mine = addon_webhooks(addon, cluster.webhooks)
    if not addon.webhooks_required:
        if not mine:
            return Check(name, OK, f"none ({addon.title}'s webhook is optional)")
        return Check(name, OK, _webhook_words(mine))
    kinds = {w.kind for w in mine}
    lacking = [k for k in ("mutating", "validating") if k not in kinds]
    if lacking:
        what = " and ".join(f"{k.capitalize()}WebhookConfiguration" for k in lacking)
        effect = (
            f"{addon.title} would not suspend new Jobs for admission"
            if "mutating" in lacking
            else f"{addon.title} would not validate its objects"
        )
        return Check(
            name, FAIL, f"no {what} of {addon.title}: {effect}", f"reinstall {addon.install}"
        )
    return Check(name, OK, _webhook_words(mine))


def _webhook_words(hooks: Sequence[Webhook]) -> str:
    names = ", ".join(sorted(w.name for w in hooks))
    services = sorted({s for w in hooks for s in w.services})
    return f"{names} (service {listed(services)})" if services else names


_IMAGE_TAG = re.compile(r":v?(\d+)\.(\d+)\.(\d+)[^/]*$")


def image_version(image: str) -> tuple[int, int, int] | None:
    """The version in an image's tag (``registry.k8s.io/kueue/kueue:v0.19.2``), or None
    (no tag, a digest, ``latest``)."""
    ref = image.split("@", 1)[0]
    m = _IMAGE_TAG.search(ref)
    return (int(m[1]), int(m[2]), int(m[3])) if m else None


def addon_controllers(
    addon: Addon, controllers: Sequence[Controller], webhooks: Sequence[Webhook] = ()
) -> list[Controller]:
    """The Deployments that run ``addon``'s controller: an image or a name with the
    add-on's word, those in its webhooks' namespaces first."""

    def repository(image: str) -> str:
        ref = image.split("@", 1)[0]
        head, _, tail = ref.rpartition(":")
        return head if head and "/" not in tail else ref

    found = [
        c
        for c in controllers
        if _mentions(c.name, addon.image_words)
        or any(_mentions(repository(i), addon.image_words) for i in c.images)
    ]
    spaces = {s.partition("/")[0] for w in addon_webhooks(addon, webhooks) for s in w.services}
    return sorted(found, key=lambda c: (c.namespace not in spaces, c.namespace, c.name))


def _controller_check(addon: Addon, cluster: ClusterFacts) -> Check:
    name = f"{addon.key}-controller"
    if cluster.controllers is None:
        why = cluster.errors.get("controllers", "no answer")
        return Check(
            name,
            WARN,
            f"cannot read the Deployments, so not {addon.title}'s version: {why}",
            "let the server's ServiceAccount list deployments (apps) to check it",
        )
    found = addon_controllers(addon, cluster.controllers, cluster.webhooks or ())
    if not found:
        return Check(
            name,
            WARN,
            f"no Deployment with a {addon.title} image found: its version is unknown "
            f"(TauGrid supports {addon.series_text})",
            f"check it yourself (kubectl get deployments -A -o wide), or install {addon.install}",
        )
    c = found[0]
    where = f"{c.namespace}/{c.name}"
    versions = [v for v in (image_version(i) for i in c.images) if v is not None]
    if c.ready < 1:
        return Check(
            name,
            FAIL,
            f"{addon.title}'s controller {where} has {c.ready} of {c.replicas} replicas ready",
            f"kubectl -n {c.namespace} describe deployment {c.name}; "
            f"kubectl -n {c.namespace} logs deployment/{c.name}",
        )
    if not versions:
        return Check(
            name,
            WARN,
            f"{where} runs {listed(c.images)}: no version in the tag "
            f"(TauGrid supports {addon.series_text})",
            f"check the version yourself, or install {addon.install}",
        )
    v = versions[0]
    shown = f"v{v[0]}.{v[1]}.{v[2]}"
    if (v[0], v[1]) != addon.series:
        return Check(
            name,
            FAIL,
            f"{addon.title} {shown} ({where}) is not supported: TauGrid supports "
            f"{addon.series_text}",
            f"install {addon.install}",
        )
    return Check(name, OK, f"{addon.title} {shown} ({where}, {c.ready}/{c.replicas} ready)")


# -- the policy's objects -----------------------------------------------------------------
CLUSTER_SCOPED = ("ResourceFlavor", "Cohort", "ClusterQueue", "WorkloadPriorityClass")
NAMESPACED = ("Namespace", "LocalQueue", "RoleBinding")
SHOWN = 5  # objects named on one line; the rest counted


def policy_object_checks(policy: PolicyFacts) -> list[Check]:
    """The policy's cluster queues (with their flavors, cohorts, priority classes) and
    its local queues (with their Namespaces) as the policy in force says them."""
    out = []
    for name, kinds, count, what in (
        ("cluster-queues", CLUSTER_SCOPED, policy.cluster_queues, "cluster queue(s)"),
        ("local-queues", NAMESPACED, policy.local_queues, "local queue(s)"),
    ):
        if policy.drift is None:
            out.append(
                Check(
                    name,
                    FAIL,
                    f"cannot compare the cluster with the policy in force: {policy.drift_error}",
                    "fix the lines above (Kueue's API), then: tau admin policy drift",
                )
            )
            continue
        items = [d for d in policy.drift if d.kind in kinds]
        wrong = [d for d in items if d.state != "left_over"]
        left = [d for d in items if d.state == "left_over"]
        if wrong:
            out.append(Check(name, FAIL, _drift_words(wrong), _apply_fix(policy)))
        elif left:
            out.append(
                Check(
                    name,
                    WARN,
                    _drift_words(left),
                    "delete them (kubectl delete ...) or add them back to the policy",
                )
            )
        else:
            out.append(Check(name, OK, f"{count} {what} in place as the policy in force says"))
    return out


def _drift_words(items: Sequence[DriftItem]) -> str:
    parts = []
    for d in items[:SHOWN]:
        if d.state == "missing":
            parts.append(f"{d.object} missing")
        elif d.state == "left_over":
            parts.append(f"{d.object} left over (not in the policy)")
        else:
            parts.append(f"{d.object} changed ({d.what})")
    more = len(items) - SHOWN
    tail = f"; and {more} more (tau admin policy drift lists them)" if more > 0 else ""
    return "; ".join(parts) + tail


def _apply_fix(policy: PolicyFacts) -> str:
    if policy.builtin:
        return "apply your policy: tau admin policy apply policy.yaml"
    return f"apply the policy again (idempotent): tau admin policy apply {policy.source}"


# -- the policy file ----------------------------------------------------------------------
def policy_file_check(policy: PolicyFacts) -> Check:
    pf = policy.policy_file
    assert pf is not None
    name = "policy-file"
    if pf.outcome == "failed":
        return Check(
            name,
            FAIL,
            f"policy file {pf.path} was not applied at start: {pf.error}",
            f"fix the cause and restart the server, or apply it: tau admin policy apply {pf.path}",
        )
    if not pf.in_force:
        return Check(
            name,
            WARN,
            f"the policy in force ({policy.source}) is not the policy file {pf.path}'s: "
            "it was applied by hand since the server started",
            "the next start applies the file again; put the change in the file (the Helm "
            "values) to keep it",
        )
    how = "applied at start" if pf.outcome == "applied" else "unchanged at start"
    return Check(name, OK, f"policy file {pf.path} is the policy in force ({how})")
