"""Which pods use which GPU (taugrid/health/podresources.py): the kubelet's pod-resources
List answered by a real gRPC server on a unix socket, as the kubelet serves it, with a
response encoded here field by field from the API's proto; a malformed answer and an
absent socket give no map (said once), never an exception."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import pytest

from servicecheck import require_module
from taugrid.health.podresources import PodResources, Undecodable, fields, gpu_pods


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(number: int, value: bytes | str | int) -> bytes:
    if isinstance(value, int):
        return varint(number << 3) + varint(value)
    raw = value.encode() if isinstance(value, str) else value
    return varint(number << 3 | 2) + varint(len(raw)) + raw


def devices(resource: str, *ids: str) -> bytes:
    return field(1, resource) + b"".join(field(2, i) for i in ids)


def container(name: str, *devs: bytes) -> bytes:
    # cpu_ids (3, a packed int64 list) as the kubelet sends it too: skipped, not misread.
    return field(1, name) + b"".join(field(2, d) for d in devs) + field(3, varint(4) + varint(5))


def pod(namespace: str, name: str, *containers: bytes) -> bytes:
    return field(1, name) + field(2, namespace) + b"".join(field(3, c) for c in containers)


RESPONSE = b"".join(
    field(1, p)
    for p in (
        pod(
            "team-a",
            "train-a0-0",
            container("workload", devices("nvidia.com/gpu", "GPU-0", "GPU-1")),
        ),
        pod(
            "team-b",
            "eval-a0-0",
            container("workload", devices("nvidia.com/gpu", "GPU-2")),
            container("sidecar", devices("example.com/fpga", "FPGA-0")),
        ),
        pod("kube-system", "exporter"),  # no devices at all
    )
)


def test_the_response_decodes_to_the_pods_on_each_gpu() -> None:
    assert gpu_pods(RESPONSE) == {
        "GPU-0": ["team-a/train-a0-0"],
        "GPU-1": ["team-a/train-a0-0"],
        "GPU-2": ["team-b/eval-a0-0"],
    }
    assert gpu_pods(b"") == {}
    with pytest.raises(Undecodable):
        list(fields(field(1, "x")[:-1]))  # cut short
    with pytest.raises(Undecodable):
        list(fields(bytes([0x0B])))  # wire type 3 (a group): not proto3


@pytest.fixture
def kubelet(tmp_path: Path) -> Iterator[tuple[str, list[bytes]]]:
    require_module("grpc", "grpcio (the agent extra) is not installed")
    import grpc

    asked: list[bytes] = []

    def list_pods(request: bytes, context: Any) -> bytes:
        asked.append(request)
        return RESPONSE

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    handler = grpc.method_handlers_generic_handler(
        "v1.PodResourcesLister", {"List": grpc.unary_unary_rpc_method_handler(list_pods)}
    )
    server.add_generic_rpc_handlers((handler,))
    socket = str(tmp_path / "kubelet.sock")
    server.add_insecure_port(f"unix://{socket}")
    server.start()
    try:
        yield socket, asked
    finally:
        server.stop(grace=None).wait(5)


def test_the_kubelet_is_asked_over_grpc_on_its_socket(kubelet: tuple[str, list[bytes]]) -> None:
    socket, asked = kubelet
    pods = PodResources(socket, timeout_s=5)
    try:
        assert pods.gpu_pods() == gpu_pods(RESPONSE)
        assert asked == [b""]  # an empty ListPodResourcesRequest
    finally:
        pods.close()


def test_no_socket_or_a_bad_answer_is_no_map_said_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    require_module("grpc", "grpcio (the agent extra) is not installed")
    caplog.set_level(logging.WARNING, "taugrid.health")
    absent = PodResources(str(tmp_path / "none.sock"), timeout_s=0.5)
    try:
        assert absent.gpu_pods() is None and absent.gpu_pods() is None
    finally:
        absent.close()
    said = [r.getMessage() for r in caplog.records if "no map of GPUs" in r.getMessage()]
    assert len(said) == 1 and "none.sock" in said[0]
    garbled = PodResources(call=lambda timeout: bytes([0x0B]))
    assert garbled.gpu_pods() is None and "does not decode" in garbled.why
