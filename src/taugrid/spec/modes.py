"""What a server's mode accepts: the one table both sides read.

A server answers its :class:`Capabilities` (``GET /api/v1/server``, and with every
``POST /runs/check``); the server refuses a submit with :func:`refusal`, and the CLI
says the same sentences before anything is sent (``tau validate``) and prints
:func:`inactive_fields` as notes. A table rather than code: when a feature lands, its
row goes away or its capability grows. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from taugrid.spec.models import TauSpec

Mode = Literal["local", "cluster"]
Effect = Literal["refused", "ignored"]
MODES: tuple[Mode, ...] = ("local", "cluster")


@dataclass(frozen=True)
class Capabilities:
    """What a server runs: the limits the table below checks a spec against."""

    mode: Mode
    max_nodes: int  # the most ``nodes`` a run may ask for
    launchers: frozenset[str]  # the ``launcher`` values it starts
    images: bool  # whether ``image:`` is honoured (else it has no effect)

    def to_dict(self) -> dict[str, object]:
        """The wire form (``GET /api/v1/server``'s ``capabilities``)."""
        return {
            "mode": self.mode,
            "max_nodes": self.max_nodes,
            "launchers": sorted(self.launchers),
            "images": self.images,
        }

    @classmethod
    def from_dict(cls, data: object) -> Capabilities:
        """From the wire, tolerantly: unknown keys are ignored, and what is missing or
        malformed is the mode's default (:data:`LOCAL` for a server that says nothing,
        as an older one does)."""
        if not isinstance(data, Mapping):
            return LOCAL
        mode = data.get("mode")
        base = CLUSTER if mode == "cluster" else LOCAL
        max_nodes = data.get("max_nodes")
        launchers = data.get("launchers")
        images = data.get("images")
        return cls(
            mode=base.mode,
            max_nodes=(
                max_nodes
                if isinstance(max_nodes, int) and not isinstance(max_nodes, bool) and max_nodes > 0
                else base.max_nodes
            ),
            launchers=(
                frozenset(launchers)
                if isinstance(launchers, list) and all(isinstance(x, str) for x in launchers)
                else base.launchers
            ),
            images=images if isinstance(images, bool) else base.images,
        )


# Local mode runs ``nodes: N`` as N process trees on its one machine (executors.local:
# launch.launch_nodes, nodegroup); a few, not a cluster's worth. ``launcher: ray`` is a
# single-node Ray cluster per run (executors.local.raydriver), where Ray is installed
# beside the server (the extra taugrid[ray]); a local server without it answers
# LOCAL_WITHOUT_RAY. LOCAL is what the CLI assumes of a local context whose server is not
# running: it does not refuse what that server may well run.
LOCAL = Capabilities(
    "local", max_nodes=8, launchers=frozenset(("command", "torchrun", "ray")), images=False
)
LOCAL_WITHOUT_RAY = replace(LOCAL, launchers=LOCAL.launchers - {"ray"})
RAY_INSTALL = "pip install 'taugrid[ray]'"
CLUSTER = Capabilities(
    "cluster", max_nodes=64, launchers=frozenset(("command", "torchrun", "ray")), images=True
)
BY_MODE: dict[Mode, Capabilities] = {"local": LOCAL, "cluster": CLUSTER}


def _always(spec: TauSpec) -> bool:
    return True


def _ray(spec: TauSpec) -> bool:
    return spec.launcher == "ray"


@dataclass(frozen=True)
class _Row:
    field: str  # dotted path into the spec
    effect: Effect  # refused at submit, or accepted and ignored
    fires: Callable[[object, Capabilities], bool]  # given the field's value and the caps
    # What follows "FIELD: " in the sentence; {value}, {mode}, {max_nodes}, {launchers}.
    says: str
    when: Callable[[TauSpec], bool] = _always  # and only for specs this holds for


_ROWS: tuple[_Row, ...] = (
    _Row(
        "nodes",
        "refused",
        lambda v, c: c.max_nodes == 1 and isinstance(v, int) and v > 1,
        "{value}: {mode} mode runs on one machine; multi-node runs need the Kubernetes mode "
        "(use nodes: 1, or launcher: torchrun with several processes)",
    ),
    _Row(
        "nodes",
        "refused",
        lambda v, c: (
            c.mode == "local" and c.max_nodes > 1 and isinstance(v, int) and v > c.max_nodes
        ),
        "{value}: {mode} mode runs at most {max_nodes} nodes, all on this one machine; "
        "more need the Kubernetes mode (use nodes: {max_nodes} or fewer)",
    ),
    _Row(
        "nodes",
        "refused",
        lambda v, c: (
            c.mode != "local" and c.max_nodes > 1 and isinstance(v, int) and v > c.max_nodes
        ),
        "{value}: {mode} mode runs at most {max_nodes} nodes a run on this server "
        "(use nodes: {max_nodes} or fewer)",
    ),
    _Row(
        "nodes",
        "refused",
        lambda v, c: c.mode == "local" and "ray" in c.launchers and isinstance(v, int) and v > 1,
        "{value}: launcher: ray runs a single-node Ray cluster in local mode; use nodes: 1 "
        "(Ray spreads the job's tasks over the run's CPUs and GPUs) or the Kubernetes mode",
        when=_ray,
    ),
    _Row(
        "launcher",
        "refused",
        lambda v, c: v not in c.launchers and not (v == "ray" and c.mode == "local"),
        "{value} is not supported in {mode} mode yet; use {launchers}",
    ),
    _Row(
        "launcher",
        "refused",
        lambda v, c: v == "ray" and c.mode == "local" and v not in c.launchers,
        "ray needs Ray installed beside the server: " + RAY_INSTALL + " in the server's "
        "environment, then restart the server (or use {launchers})",
    ),
    _Row(
        "image",
        "ignored",
        lambda v, c: v is not None and not c.images,
        "{value} has no effect in {mode} mode ({mode} mode runs in the submitter's environment)",
    ),
)


def _value(spec: TauSpec, path: str) -> object:
    value: object = spec
    for part in path.split("."):
        value = getattr(value, part)
    return value


def _either(words: list[str]) -> str:
    if not words:
        return "none"
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def _sentences(spec: TauSpec, caps: Capabilities | Mode, effect: Effect) -> list[str]:
    c = BY_MODE[caps] if isinstance(caps, str) else caps
    out = []
    for row in _ROWS:
        value = _value(spec, row.field)
        if row.effect == effect and row.fires(value, c) and row.when(spec):
            shown = ", ".join(value) if isinstance(value, dict) else value
            said = row.says.format(
                value=shown,
                mode=c.mode,
                max_nodes=c.max_nodes,
                launchers=_either(sorted(c.launchers)),
            )
            out.append(f"{row.field}: {said}")
    return out


def refusals(spec: TauSpec, caps: Capabilities | Mode) -> list[str]:
    """The sentences a server of ``caps`` refuses this spec's submit with (none: it may)."""
    return _sentences(spec, caps, "refused")


def refusal(spec: TauSpec, caps: Capabilities | Mode) -> str | None:
    """The one message of the submit's ``UsageError`` (every refusal, joined), or None."""
    found = refusals(spec, caps)
    return "; ".join(found) if found else None


def inactive_fields(spec: TauSpec, caps: Capabilities | Mode) -> list[str]:
    """Sentences naming each field that is set but has no effect on a server of ``caps``
    (or of the mode named) today: accepted, and ignored."""
    return _sentences(spec, caps, "ignored")
