#!/usr/bin/env bash
# Build the Helm archives a platform team installs (docs/install.md). Needs the network:
# it fetches Kueue's and KubeRay's charts at the versions deploy/helm/taugrid-stack pins.
#
#   scripts/package-chart.sh            # -> dist/taugrid-0.1.0.tgz, dist/taugrid-stack-0.1.0.tgz
#   helm install taugrid dist/taugrid-stack-0.1.0.tgz -n taugrid-system --create-namespace
#
# dist/taugrid-stack-<version>.tgz holds Kueue, the KubeRay operator and TauGrid: one
# `helm install` of it needs nothing else. dist/taugrid-<version>.tgz is TauGrid alone,
# for a cluster that already runs Kueue 0.19.x and KubeRay 1.7.x.
#
# HELM (default: .venv/bin/helm from `make test`, else helm on PATH) and OUT (default:
# dist/) change its defaults. The first run writes deploy/helm/taugrid-stack/Chart.lock
# (the fetched charts' digests): commit it; later runs verify against it.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
CORE="$REPO/deploy/helm/taugrid"
STACK="$REPO/deploy/helm/taugrid-stack"
OUT=${OUT:-$REPO/dist}
if [ -z "${HELM:-}" ]; then
  if [ -x "$REPO/.venv/bin/helm" ]; then HELM="$REPO/.venv/bin/helm"; else HELM=helm; fi
fi
KUBE_VERSION=${KUBE_VERSION:-1.32.0}

command -v "$HELM" >/dev/null 2>&1 || {
  echo "package-chart: no helm (make test installs .venv/bin/helm; or set HELM=PATH)" >&2
  exit 1
}
mkdir -p "$OUT"

# The core chart: lint and render it as CI does, then package it. The archive holds the
# files its files/ symlinks point at (deploy/prometheus, deploy/grafana).
"$HELM" lint --strict "$CORE"
"$HELM" template taugrid "$CORE" --kube-version "$KUBE_VERSION" >/dev/null
"$HELM" package "$CORE" --destination "$OUT"

# The stack: Kueue's and KubeRay's charts from their registries, TauGrid's from ../taugrid.
if [ -f "$STACK/Chart.lock" ]; then
  "$HELM" dependency build "$STACK"
else
  "$HELM" dependency update "$STACK"
  echo "package-chart: wrote $STACK/Chart.lock: commit it" >&2
fi
"$HELM" lint --strict "$STACK"
"$HELM" template taugrid "$STACK" --namespace taugrid-system --kube-version "$KUBE_VERSION" >/dev/null
"$HELM" package "$STACK" --destination "$OUT"

VERSION=$(sed -n 's/^version: *//p' "$STACK/Chart.yaml")
echo "install with: helm install taugrid $OUT/taugrid-stack-$VERSION.tgz -n taugrid-system --create-namespace"
