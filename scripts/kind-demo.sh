#!/usr/bin/env bash
# TauGrid on a local kind cluster, end to end: Kueue and KubeRay, TauGrid's image built
# and loaded, the server in the cluster, a policy, then a run submitted, watched, read
# and cancelled with the tau CLI. See docs/kubernetes.md, which walks through each step.
#
# NOT run on the project's build machines (they have no container engine and no
# cluster). Checked there: `bash -n`, shellcheck where installed, and the manifests it
# applies (tests/unit/test_deploy_manifests.py).
#
#   scripts/kind-demo.sh          # up, then demo
#   scripts/kind-demo.sh up       # cluster, Kueue, KubeRay, image, server
#   scripts/kind-demo.sh demo     # log in, apply the policy, run, status, logs, cancel
#   scripts/kind-demo.sh down     # delete the kind cluster
#
# Needs: docker, kind, kubectl, helm, curl, and the tau CLI on PATH (make demo, then
# source .venv/bin/activate). Settings: CLUSTER, KUEUE_VERSION, KUBERAY_VERSION,
# LOCAL_PORT (where the server is port-forwarded, default 18000).
set -euo pipefail

CLUSTER=${CLUSTER:-taugrid}
KUEUE_VERSION=${KUEUE_VERSION:-v0.19.2}
KUBERAY_VERSION=${KUBERAY_VERSION:-1.7.0}
LOCAL_PORT=${LOCAL_PORT:-18000}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$REPO/pyproject.toml")
IMAGE=ghcr.io/taugrid/taugrid:$VERSION # the pods' helper image (DEFAULT_HELPER_IMAGE)
DEMO=$REPO/deploy/kubernetes/demo

step() { printf '\n== %s\n' "$*"; }
need() {
  command -v "$1" >/dev/null 2>&1 || {
    echo "kind-demo: $1 is needed: $2" >&2
    exit 2
  }
}

up() {
  need docker "https://docs.docker.com/engine/install/"
  need kind "https://kind.sigs.k8s.io/docs/user/quick-start/#installation"
  need kubectl "https://kubernetes.io/docs/tasks/tools/"
  need helm "https://helm.sh/docs/intro/install/"

  step "kind cluster $CLUSTER"
  if ! kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
    kind create cluster --name "$CLUSTER" --wait 180s
  fi
  kubectl config use-context "kind-$CLUSTER"

  # KubeRay first: Kueue's RayJob integration then finds the CRDs at its start.
  step "KubeRay operator $KUBERAY_VERSION (Helm)"
  helm repo add kuberay https://ray-project.github.io/kuberay-helm/ --force-update
  helm upgrade --install kuberay-operator kuberay/kuberay-operator \
    --version "$KUBERAY_VERSION" --namespace kuberay-system --create-namespace --wait

  step "Kueue $KUEUE_VERSION"
  kubectl apply --server-side \
    -f "https://github.com/kubernetes-sigs/kueue/releases/download/$KUEUE_VERSION/manifests.yaml"
  kubectl -n kueue-system rollout status deployment/kueue-controller-manager --timeout=300s
  # Jobs are suspended by Kueue's webhook: wait until it answers (a dry-run Job).
  for _ in $(seq 60); do
    if kubectl create job kueue-webhook-probe --image=busybox --dry-run=server -o name \
      >/dev/null 2>&1; then
      break
    fi
    sleep 2
  done

  step "image $IMAGE (Dockerfile), loaded into kind"
  docker build -t "$IMAGE" "$REPO"
  kind load docker-image "$IMAGE" --name "$CLUSTER"

  step "TauGrid server (deploy/kubernetes/)"
  kubectl apply -f "$REPO/deploy/kubernetes/"
  kubectl -n taugrid-system rollout status deployment/taugrid --timeout=300s
}

PF_PID=
port_forward() {
  kubectl -n taugrid-system port-forward svc/taugrid "$LOCAL_PORT:8000" >/dev/null 2>&1 &
  PF_PID=$!
  trap 'kill "$PF_PID" 2>/dev/null || true' EXIT
  for _ in $(seq 30); do
    curl -fsS "http://127.0.0.1:$LOCAL_PORT/healthz" >/dev/null 2>&1 && return 0
    sleep 1
  done
  echo "kind-demo: the server does not answer on 127.0.0.1:$LOCAL_PORT" >&2
  exit 1
}

demo() {
  need kubectl "https://kubernetes.io/docs/tasks/tools/"
  need curl "your system's package manager"
  need tau "make demo && source .venv/bin/activate"

  step "log in (the bootstrap admin token of the shared server)"
  port_forward
  kubectl -n taugrid-system exec deploy/taugrid -- cat /var/lib/taugrid/admin-token |
    tau login "http://127.0.0.1:$LOCAL_PORT" --name kind --workspace demo --token-stdin

  step "workspace and policy: Namespace tau-demo, ResourceFlavor, ClusterQueue, LocalQueue"
  workspaces=$(tau admin workspace list -o json)
  [[ $workspaces == *'"demo"'* ]] || tau admin workspace create demo
  tau admin policy apply "$DEMO/policy.yaml"
  kubectl apply -f "$DEMO/runs-pvc.yaml"
  tau admin policy drift
  kubectl get resourceflavors,clusterqueues
  kubectl -n tau-demo get localqueues

  cd "$DEMO/hello"
  step "what a run becomes (nothing is created)"
  tau run --dry-run | sed -n '1,40p' # sed reads it all: no SIGPIPE under pipefail

  step "a run, watched to its end"
  tau run --wait
  tau status hello
  tau logs hello --tail 5

  step "a run cancelled while it runs"
  tau run --name hello-cancel --set env.STEPS=300
  for _ in $(seq 90); do
    state=$(tau status hello-cancel -o json)
    grep -Eq '"state": ?"RUNNING"' <<<"$state" && break
    sleep 2
  done
  tau status hello-cancel
  kubectl -n tau-demo get jobs,pods -l taugrid.io/managed-by=taugrid
  tau cancel hello-cancel
  tau status hello-cancel
  tau list
}

down() {
  need kind "https://kind.sigs.k8s.io/docs/user/quick-start/#installation"
  kind delete cluster --name "$CLUSTER"
}

case "${1:-all}" in
  up) up ;;
  demo) demo ;;
  down) down ;;
  all)
    up
    demo
    ;;
  *)
    echo "usage: $0 [up|demo|down]" >&2
    exit 2
    ;;
esac
