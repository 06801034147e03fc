"""Pod log lines, pure: timestamps, the resume filter, which pod is which rank, prefixes.

The kubelet's ``timestamps=true`` lines are ``<RFC3339Nano> <content>``. The archive keeps
them so (``logarchive``): the timestamp is what a cut stream or a restarted server resumes
from (``sinceTime``), and it is stripped before anything is served.

Resuming cannot rely on ``sinceTime`` alone: the API server forwards it to the kubelet in
whole seconds (``metav1.Time`` is RFC3339), so a resumed stream repeats every line of the
last archived second, and two lines may carry the same timestamp. :class:`ResumeFilter`
drops what is older than the last archived line, and at that exact timestamp the lines
whose content was already archived there (as a multiset: the same text twice at one
instant is two lines).

Ranks (:func:`assign_ranks`): a Job's pod is rank 0; an Indexed Job's pod is its
completion index; a RayJob's head is rank 0, its workers 1..n by creation time (then
name), and the submitter pod (whose log is the job's output: ``ray job submit`` streams
the driver) the rank after the last worker. A pod replaced under the same index keeps the
rank: its lines follow its predecessor's.
"""

from __future__ import annotations

import datetime
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from taugrid.manifests.workloads import CONTAINER, INDEX_ANNOTATION

RAY_NODE_TYPE = "ray.io/node-type"  # KubeRay's label on the cluster's pods: head | worker
RAY_CONTAINERS = {"head": "ray-head", "worker": "ray-worker"}  # as workloads.py renders
SUBMITTER_CONTAINER = "ray-job-submitter"  # KubeRay's default submitter (K8sJobMode)
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"  # the Job controller's, on every pod
ENDED_PHASES = frozenset({"Succeeded", "Failed"})


# -- timestamps ----------------------------------------------------------------------------
def timestamp_ns(ts: bytes | str) -> int | None:
    """Nanoseconds since the epoch of an RFC3339 timestamp (``Z`` or an offset, any number
    of fraction digits), or None when it is not one. Strings do not compare: RFC3339Nano
    trims trailing zeros, so ``...:05Z`` sorts after ``...:05.5Z``."""
    text = ts.decode("ascii", "replace") if isinstance(ts, bytes) else ts
    main, dot, rest = text.partition(".")
    frac = ""
    if dot:
        digits = len(rest) - len(rest.lstrip("0123456789"))
        frac, zone = rest[:digits], rest[digits:]
    else:
        main, zone = text[:19], text[19:]
    if zone in ("Z", "z"):
        zone = "+00:00"
    try:
        when = datetime.datetime.fromisoformat(main + zone)
    except ValueError:
        return None
    if when.tzinfo is None or len(frac) > 9:
        return None
    seconds = int(when.timestamp())
    return seconds * 1_000_000_000 + int((frac or "0").ljust(9, "0"))


@dataclass(frozen=True)
class Line:
    """One archived line: its timestamp as sent, that timestamp in ns, its content (always
    ending with a newline)."""

    ts: bytes
    ts_ns: int
    content: bytes

    def archived(self) -> bytes:
        return self.ts + b" " + self.content


def split_lines(data: bytes) -> list[bytes]:
    """``data`` cut after each newline. Not ``bytes.splitlines``: that also cuts at a
    carriage return, which a progress bar writes within its line (the kubelet does not
    cut there either)."""
    out = data.split(b"\n")
    last = out.pop()
    lines = [line + b"\n" for line in out]
    return [*lines, last] if last else lines


def format_ts(ns: int) -> bytes:
    """RFC3339 with nanoseconds, as the kubelet writes them (without trimming zeros)."""
    when = datetime.datetime.fromtimestamp(ns // 1_000_000_000, datetime.UTC)
    return f"{when:%Y-%m-%dT%H:%M:%S}.{ns % 1_000_000_000:09d}Z".encode()


def parse_line(raw: bytes, previous_ns: int = 0) -> Line:
    """A ``<ts> <content>`` line. One without a valid timestamp keeps its whole text as
    content and the previous line's time (nothing is dropped for a malformed stamp)."""
    content = raw if raw.endswith(b"\n") else raw + b"\n"
    ts, sep, rest = content.partition(b" ")
    ns = timestamp_ns(ts) if sep else None
    if ns is None:
        return Line(format_ts(previous_ns), previous_ns, content)
    return Line(ts, ns, rest)


# -- resuming --------------------------------------------------------------------------------
@dataclass
class ResumePoint:
    """Where an archive ends: the last line's timestamp, and the contents archived at that
    very timestamp (what a resumed stream may send again)."""

    ts: bytes | None = None
    ts_ns: int = -1
    at_ts: Counter[bytes] = field(default_factory=Counter)

    @property
    def since_time(self) -> str | None:
        return None if self.ts is None else self.ts.decode("ascii")

    def advance(self, line: Line) -> None:
        """``line`` was archived."""
        if line.ts_ns != self.ts_ns:
            self.at_ts = Counter()
        self.ts, self.ts_ns = line.ts, line.ts_ns
        self.at_ts[line.content] += 1

    @classmethod
    def of(cls, lines: Iterable[Line]) -> ResumePoint:
        point = cls()
        for line in lines:
            point.advance(line)
        return point


class ResumeFilter:
    """Drops the lines of a resumed stream that the archive already holds (see the module
    docstring). Once a line newer than the resume point passed, everything passes: a
    container's lines come in order, and a clock step must not lose later ones."""

    def __init__(self, point: ResumePoint) -> None:
        self._ts_ns = point.ts_ns
        self._left = Counter(point.at_ts)
        self._passed = point.ts is None

    def admit(self, line: Line) -> bool:
        if self._passed:
            return True
        if line.ts_ns < self._ts_ns:
            return False
        if line.ts_ns == self._ts_ns and self._left[line.content] > 0:
            self._left[line.content] -= 1
            return False
        self._passed = line.ts_ns > self._ts_ns
        return True


# -- pods ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PodMeta:
    """What the archive records of a pod when it starts following it."""

    pod: str
    uid: str
    container: str
    role: str  # job | indexed | head | worker | submitter
    index: int = 0  # the completion index (role indexed)
    created: str = ""  # creationTimestamp: orders Ray workers and replaced pods
    multi: bool = False  # the attempt has several pods (Ray, or an Indexed Job of N > 1)

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PodMeta:
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in known})


def pod_meta(pod: Mapping[str, Any]) -> PodMeta:
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    containers = [c for c in (pod.get("spec") or {}).get("containers") or [] if c.get("name")]
    names = [str(c["name"]) for c in containers]
    pod_name, uid = str(meta.get("name", "")), str(meta.get("uid", ""))
    created = str(meta.get("creationTimestamp", ""))

    def of(container: str, role: str, index: int = 0, multi: bool = False) -> PodMeta:
        return PodMeta(pod_name, uid, container, role, index, created, multi)

    node_type = labels.get(RAY_NODE_TYPE)
    if node_type in RAY_CONTAINERS:
        return of(RAY_CONTAINERS[node_type], node_type, multi=True)
    if SUBMITTER_CONTAINER in names:
        return of(SUBMITTER_CONTAINER, "submitter", multi=True)
    container = CONTAINER if CONTAINER in names or not names else names[0]
    index = (meta.get("annotations") or {}).get(INDEX_ANNOTATION)
    if index is None or not str(index).isdigit():
        return of(container, "job")
    nodes = _env(containers, container, "NNODES")
    return of(
        container, "indexed", int(index), nodes is not None and nodes.isdigit() and int(nodes) > 1
    )


def _env(containers: list[Mapping[str, Any]], container: str, name: str) -> str | None:
    for c in containers:
        if c.get("name") == container:
            for var in c.get("env") or []:
                if var.get("name") == name and isinstance(var.get("value"), str):
                    return str(var["value"])
    return None


def assign_ranks(metas: Iterable[PodMeta]) -> dict[str, int]:
    """Each pod's rank (see the module docstring), by pod name."""
    metas = list(metas)
    ranks: dict[str, int] = {}
    workers = sorted((m for m in metas if m.role == "worker"), key=lambda m: (m.created, m.pod))
    for m in metas:
        if m.role == "indexed":
            ranks[m.pod] = m.index
        elif m.role in ("job", "head"):
            ranks[m.pod] = 0
    for i, m in enumerate(workers, start=1):
        ranks[m.pod] = i
    for m in metas:
        if m.role == "submitter":
            ranks[m.pod] = len(workers) + 1
    return ranks


def prefixed(metas: Iterable[PodMeta], ranks: Mapping[str, int]) -> bool:
    """Whether a merged stream prefixes its lines: when the attempt has several pods (as
    its pods say, so the first lines are prefixed before rank 1 has written any)."""
    metas = list(metas)
    return any(m.multi for m in metas) or len(set(ranks.values())) > 1


def prefix(rank: int) -> bytes:
    return b"[rank %d] " % rank


def container_started(pod: Mapping[str, Any], container: str) -> bool:
    """Whether the container has a log to follow (a waiting one answers 400)."""
    status = pod.get("status") or {}
    if status.get("phase") not in ("Running", *ENDED_PHASES):
        return False
    for cs in status.get("containerStatuses") or []:
        if cs.get("name") == container:
            states = {**(cs.get("lastState") or {}), **(cs.get("state") or {})}
            return "running" in states or "terminated" in states
    return not status.get("containerStatuses")  # no detail (a fake): the phase says so


def pod_ended(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ENDED_PHASES
