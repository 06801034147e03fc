"""Fixtures for the Kubernetes client tests: kmock's emulator on loopback (tests/kube_emulator.py)
and a LightkubeClient pointed at it through a kubeconfig file, with fast retries whose
sleeps are recorded instead of slept."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kube_emulator import KubeEmulator, Sleeps
from taugrid.executors.kubernetes.lightkube_client import LightkubeClient


@pytest.fixture
def kube_emulator() -> Iterator[KubeEmulator]:
    with KubeEmulator() as emulator:
        yield emulator


@pytest.fixture
def versioned_emulator() -> Iterator[KubeEmulator]:
    """An emulator that stamps resourceVersions and resumes watches from them."""
    with KubeEmulator(resource_versions=True) as emulator:
        yield emulator


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


def client_for(emulator: KubeEmulator, tmp_path: Path, sleeps: Sleeps) -> LightkubeClient:
    config = emulator.write_kubeconfig(tmp_path / f"kubeconfig-{id(emulator)}")
    return LightkubeClient.from_kubeconfig(
        config, timeout_s=5.0, retry_budget_s=10.0, sleep=sleeps, jitter=lambda: 1.0
    )


@pytest.fixture
def kube(kube_emulator: KubeEmulator, tmp_path: Path, sleeps: Sleeps) -> Iterator[LightkubeClient]:
    with client_for(kube_emulator, tmp_path, sleeps) as client:
        yield client


@pytest.fixture
def versioned_kube(
    versioned_emulator: KubeEmulator, tmp_path: Path, sleeps: Sleeps
) -> Iterator[LightkubeClient]:
    with client_for(versioned_emulator, tmp_path, sleeps) as client:
        yield client
