"""``workspaces[].storage``: a PVC or an object storage URL, each mistake at its
file:line:col."""

from __future__ import annotations

import pytest

from taugrid.errors import SpecError
from taugrid.policy.loader import load_policy_text
from taugrid.policy.models import Storage

POLICY = """\
flavors: [{name: f}]
cluster_queues: [{name: q, resources: [{flavor: f, quotas: {gpu: 1}}]}]
workspaces:
  - name: w
    local_queues: [{name: default, cluster_queue: q}]
    storage: %s
"""


def storage(text: str) -> Storage | None:
    return load_policy_text(POLICY % text, "policy.yaml").policy.workspaces[0].storage


def problems(text: str) -> list[str]:
    with pytest.raises(SpecError) as info:
        storage(text)
    return [str(p) for p in info.value.problems]


def test_a_pvc_or_a_url_with_its_endpoint_and_secret() -> None:
    assert storage("{pvc: runs}") == Storage(pvc="runs")
    assert storage("{url: 's3://tau-runs/team/b'}") == Storage(url="s3://tau-runs/team/b")
    full = storage(
        "{url: 's3://tau-runs', endpoint_url: 'http://minio:9000', credentials_secret: s3-creds}"
    )
    assert full == Storage(
        url="s3://tau-runs", endpoint_url="http://minio:9000", credentials_secret="s3-creds"
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "{pvc: runs, url: 's3://b-1'}",
            "policy.yaml:6:14: workspaces[0].storage: pvc and url are mutually exclusive: "
            "set one of them",
        ),
        (
            "{}",
            "policy.yaml:6:14: workspaces[0].storage: set exactly one of pvc (a "
            "PersistentVolumeClaim) and url (object storage)",
        ),
        (
            "{pvc: runs, credentials_secret: s}",
            "policy.yaml:6:14: workspaces[0].storage: credentials_secret goes with url, "
            "not with pvc",
        ),
        (
            "{url: 'gs://bucket'}",
            "policy.yaml:6:20: workspaces[0].storage.url: must be s3://bucket[/prefix], "
            "got 'gs://bucket'",
        ),
        (
            "{url: 's3://Bucket'}",
            "policy.yaml:6:20: workspaces[0].storage.url: bucket 'Bucket' is not an S3 bucket "
            "name: 3 to 63 lowercase letters, digits, '.' and '-', starting and ending with a "
            "letter or digit",
        ),
        (
            "{url: 's3://bkt/a/../b'}",
            "policy.yaml:6:20: workspaces[0].storage.url: prefix 'a/../b' must be '/'-separated "
            "parts of letters, digits and '._=+-' (no empty, '.' or '..' parts)",
        ),
        (
            "{url: 's3://bkt', endpoint_url: 'http://key:secret@minio'}",
            "policy.yaml:6:46: workspaces[0].storage.endpoint_url: must not carry a user or "
            "password (use credentials_secret)",
        ),
        (
            "{url: 's3://bkt', endpoint_url: 'ftp://minio'}",
            "policy.yaml:6:46: workspaces[0].storage.endpoint_url: must be an http:// or "
            "https:// URL, got 'ftp://minio'",
        ),
        (
            "{url: 's3://bkt', credentials_secret: Not_A_Name}",
            "policy.yaml:6:52: workspaces[0].storage.credentials_secret: 'Not_A_Name' is not a "
            "Kubernetes Secret name: lowercase letters, digits, '-' and '.', starting and "
            "ending with a letter or digit, at most 253 characters",
        ),
        (
            "{url: 's3://bkt', endpoint: 'http://minio'}",
            "policy.yaml:6:32: workspaces[0].storage.endpoint: unknown field 'endpoint', did "
            "you mean 'endpoint_url'?",
        ),
    ],
)
def test_each_mistake_is_said_where_it_is(text: str, expected: str) -> None:
    assert problems(text) == [expected]
