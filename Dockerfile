# syntax=docker/dockerfile:1
#
# TauGrid's one image: the cluster server (the default command) and the in-pod helper
# that every run's pods start as their init container and sidecar
# (`python -m taugrid.podhelper fetch-code|fetch-resume|sync-checkpoints`,
# manifests/workloads.py). Built from the project's own wheel.
#
#   docker build -t ghcr.io/taugrid/taugrid:0.1.0 .
#
# The tag is what the server puts in pods when TAU_HELPER_IMAGE is unset
# (manifests/plan.py DEFAULT_HELPER_IMAGE = ghcr.io/taugrid/taugrid:<version>).
#
# This image has not been built on the project's build machines (they have no image
# builder): tests/unit/test_dockerfile.py reads this file, builds the wheel as the
# builder stage does, installs it into a fresh virtualenv and runs the default command
# and the helper's commands from it outside a container. See docs/kubernetes.md.
#
# The base image is pinned by tag. A release also pins it by digest
# (python:3.11.14-slim-bookworm@sha256:...), resolved and recorded by the release
# process, not in this file.
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

# --- builder: the wheel, and a virtualenv with it and the cluster server's extras -----
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
# hatchling (pinned in pyproject's build-system) builds the wheel; `s3` is object
# storage for checkpoints and outputs (the sync-checkpoints and fetch-resume helpers);
# `agent` the GPU health agent's pod-resources client (tau health agent, on each node).
RUN pip wheel --no-deps -w /wheels . \
    && python -m venv /opt/taugrid \
    && /opt/taugrid/bin/pip install "$(ls /wheels/taugrid-*.whl)[s3,agent]"

# --- runtime ----------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}
# uid/gid 1000: the pods' runAsUser/runAsGroup/fsGroup (manifests/workloads.py DEFAULT_UID).
RUN groupadd --gid 1000 taugrid \
    && useradd --uid 1000 --gid 1000 --create-home --home-dir /home/taugrid \
        --shell /usr/sbin/nologin taugrid \
    && install -d -o 1000 -g 1000 -m 0700 /var/lib/taugrid
COPY --from=builder /opt/taugrid /opt/taugrid
ENV PATH=/opt/taugrid/bin:$PATH \
    TAU_HOME=/var/lib/taugrid \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 1000:1000
WORKDIR /home/taugrid
VOLUME ["/var/lib/taugrid"]
# 8000: the port of the in-cluster URL pods fetch code from (DEFAULT_SERVER_URL,
# http://taugrid.taugrid-system.svc:8000).
EXPOSE 8000
# Kubernetes ignores HEALTHCHECK: deploy/kubernetes/server.yaml probes GET /healthz.
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4)"]
# No ENTRYPOINT: pods run the helper as `python -m taugrid.podhelper ...` (their command).
CMD ["python", "-m", "taugrid.server", "--shared", "--host", "0.0.0.0", "--port", "8000", "--executor", "kubernetes"]
