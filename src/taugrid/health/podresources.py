"""Which pods use which GPU on this node: the kubelet's pod-resources API
(``v1.PodResourcesLister/List`` over gRPC on the kubelet's unix socket), which names
the device IDs each container was given. The NVIDIA device plugin's device IDs are the
GPUs' UUIDs, so an L2 fault on one GPU can be narrowed to the pods on it.

grpcio (the ``agent`` extra) is imported only here, when first asked; without it, or
without the socket, the map is None and the agent says why once (the server then takes
an L2 fault as the node's GPU pods', failing safe). The response is decoded by hand: the
four messages it needs are a few fields of strings (from ``k8s.io/kubelet``'s
``podresources/v1/api.proto``), not worth generated code.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

log = logging.getLogger("taugrid.health")
SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
METHOD = "/v1.PodResourcesLister/List"
GPU_RESOURCE = "nvidia.com/gpu"


class Undecodable(ValueError):
    """A response that is not the protobuf it should be."""


def _varint(buf: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(buf) or shift > 63:
            raise Undecodable("a varint runs past the message")
        byte = buf[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7


def fields(buf: bytes) -> Iterator[tuple[int, bytes | int]]:
    """(field number, value) of a protobuf message: bytes for length-delimited fields,
    ints for varints; fixed-width fields are skipped."""
    at = 0
    while at < len(buf):
        key, at = _varint(buf, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _varint(buf, at)
            yield number, value
        elif wire == 2:
            size, at = _varint(buf, at)
            if at + size > len(buf):
                raise Undecodable("a field runs past the message")
            yield number, buf[at : at + size]
            at += size
        elif wire == 1:
            at += 8
        elif wire == 5:
            at += 4
        else:
            raise Undecodable(f"wire type {wire} is not protobuf 3's")


def _strings(buf: bytes, number: int) -> list[str]:
    return [v.decode() for n, v in fields(buf) if n == number and isinstance(v, bytes)]


def _messages(buf: bytes, number: int) -> list[bytes]:
    return [v for n, v in fields(buf) if n == number and isinstance(v, bytes)]


def gpu_pods(response: bytes, resource: str = GPU_RESOURCE) -> dict[str, list[str]]:
    """GPU device ID -> the pods ("namespace/name") given it, from a
    ListPodResourcesResponse: pod_resources=1 {name=1, namespace=2, containers=3
    {devices=2 {resource_name=1, device_ids=2}}}."""
    out: dict[str, list[str]] = {}
    for pod in _messages(response, 1):
        name = "".join(_strings(pod, 1))
        namespace = "".join(_strings(pod, 2))
        for container in _messages(pod, 3):
            for devices in _messages(container, 2):
                if "".join(_strings(devices, 1)) != resource:
                    continue
                for device in _strings(devices, 2):
                    owners = out.setdefault(device, [])
                    if f"{namespace}/{name}" not in owners:
                        owners.append(f"{namespace}/{name}")
    return out


class PodResources:
    """The kubelet's answer, asked each time (it is a local call, a few ms)."""

    def __init__(
        self,
        socket: str = SOCKET,
        *,
        timeout_s: float = 5.0,
        call: Callable[[float], bytes] | None = None,
    ) -> None:
        self.socket = socket
        self.timeout_s = timeout_s
        self._call = call
        self._channel: Any = None
        self.why = ""

    def _open(self) -> Callable[[float], bytes] | None:
        if self._call is not None:
            return self._call
        try:
            import grpc
        except ImportError:
            self._say("grpcio is not installed (pip install 'taugrid[agent]')")
            return None
        self._channel = grpc.insecure_channel(f"unix://{self.socket}")
        method = self._channel.unary_unary(METHOD)  # bytes in, bytes out

        def call(timeout: float) -> bytes:
            raw: bytes = method(b"", timeout=timeout)
            return raw

        self._call = call
        return call

    def gpu_pods(self) -> dict[str, list[str]] | None:
        """GPU UUID -> pods on it; None when the kubelet cannot be asked (said once)."""
        call = self._open()
        if call is None:
            return None
        try:
            found = gpu_pods(call(self.timeout_s))
        except Undecodable as exc:
            self._say(f"the kubelet's pod-resources answer does not decode: {exc}")
            return None
        except Exception as exc:  # grpc.RpcError: the socket absent, the kubelet away
            self._say(f"the kubelet's pod-resources API at {self.socket} answers not: {exc}")
            return None
        self.why = ""
        return found

    def _say(self, why: str) -> None:
        if why != self.why:
            log.warning("GPU health: no map of GPUs to pods: %s", why)
        self.why = why

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None
