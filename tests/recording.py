"""Test doubles that record what they were asked, shared by the health tests."""

from __future__ import annotations

from taugrid.domain.stops import StopReason


class Stops:
    """The engine's ``request_stop`` as the GPU health monitor and controller call it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, StopReason, str, float | None]] = []

    def request_stop(
        self, run_id: str, reason: StopReason, message: str, *, fault_at: float | None = None
    ) -> bool:
        self.calls.append((run_id, reason, message, fault_at))
        return True


def gpu_node(name: str, gpus: int = 8, **spec: object) -> dict[str, object]:
    """A Node object offering ``gpus`` nvidia.com/gpu (``spec`` as given)."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "spec": spec,
        "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}},
    }
