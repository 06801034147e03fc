"""Following an attempt's pods and archiving their logs (``logarchive``), one thread a pod.

Whoever owns the attempt (the executor) calls :meth:`PodLogArchiver.follow` once it has
created the attempt's objects, feeds :meth:`PodLogArchiver.pod_seen` from its pod informer,
and :meth:`PodLogArchiver.stop` at shutdown. None of them blocks (the API calls happen on
the archiver's threads) and none raises for one pod: an API error is logged on one line
(again only when it changes) and retried with capped backoff.

A follower streams its container's log (``follow=True, timestamps=True``) from the
archive's resume point. When the stream ends (the container exited, or the connection
was cut, or the kubelet restarted) it asks whether the pod ended: if it did (Succeeded,
Failed, or gone) a last read without ``follow`` fetches what a cut stream may have missed,
and the archive is completed; otherwise it follows again from the new resume point. A
restarted server does the same from the files, so no line is lost or repeated (see
``loglines.ResumeFilter`` for why ``sinceTime`` alone would repeat some).

Secret values are masked in what is archived when ``follow`` is given them, by the masker
the composition root supplies (``make_masker``): the local executor's ``logmask`` is the
one implementation, and the two executors may not import each other.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from taugrid.errors import TauError
from taugrid.executors.kubernetes.client import KubeClient, KubeError, NotFound, ObjectRef
from taugrid.executors.kubernetes.logarchive import PodArchive, is_complete, pods_dir, read_metas
from taugrid.executors.kubernetes.loglines import (
    JOB_NAME_LABEL,
    Line,
    PodMeta,
    ResumeFilter,
    ResumePoint,
    container_started,
    parse_line,
    pod_ended,
    pod_meta,
)
from taugrid.manifests.workloads import job_name
from taugrid.ports.executor import AttemptKey

log = logging.getLogger(__name__)

LineMask = Callable[[bytes], bytes]
MaskerFactory = Callable[[Sequence[str]], LineMask]
"""Given a run's secret values, a function masking them in one line."""


def attempt_selectors(key: AttemptKey) -> list[dict[str, str]]:
    """The label selectors of an attempt's pods: TauGrid's labels (every pod it renders),
    and the Job controller's job-name, which KubeRay's submitter pod carries (its Job is
    named after the RayJob; the submitter template gets none of TauGrid's labels)."""
    own = {"taugrid.io/run-id": key.run_id, "taugrid.io/attempt": str(key.attempt)}
    try:
        return [own, {JOB_NAME_LABEL: job_name(key.run_id, key.attempt)}]
    except TauError:  # a run id too long for a Job name has no such pods either
        return [own]


@dataclass(frozen=True)
class _Attempt:
    key: AttemptKey
    namespace: str
    selectors: tuple[Mapping[str, str], ...]
    directory: Path
    mask: LineMask | None

    def selects(self, pod: Mapping[str, Any]) -> bool:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        return meta.get("namespace") == self.namespace and any(
            all(labels.get(k) == v for k, v in sel.items()) for sel in self.selectors
        )


@dataclass(frozen=True)
class Backoff:
    initial_s: float = 1.0
    cap_s: float = 30.0


class PodLogArchiver:
    """See the module docstring. ``root`` is the runs directory (``pods_dir`` layout)."""

    def __init__(
        self,
        client: KubeClient,
        root: Path,
        *,
        make_masker: MaskerFactory | None = None,
        backoff: Backoff = Backoff(),
    ) -> None:
        self.client = client
        self.root = root
        self.make_masker = make_masker
        self.backoff = backoff
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._attempts: dict[AttemptKey, _Attempt] = {}
        self._followers: dict[tuple[AttemptKey, str], _PodFollower] = {}
        self._threads: list[threading.Thread] = []

    def follow(
        self,
        key: AttemptKey,
        namespace: str,
        pods_selectors: Sequence[Mapping[str, str]] | None = None,
        *,
        secrets: Sequence[str] = (),
    ) -> None:
        """Archive the logs of the attempt's pods (default selectors: ``attempt_selectors``).
        Lists them once on a thread of its own, so pods that exist already are found, and
        completes archives whose pods vanished while nobody followed them."""
        mask = None
        if secrets and self.make_masker is None:
            log.warning("pod logs of %s/%s: secrets given, no masker", key.run_id, key.attempt)
        elif secrets and self.make_masker is not None:
            try:
                mask = self.make_masker(secrets)
            except Exception as exc:  # the caller must not fail for it: the pods are followed
                log.warning("pod logs of %s/%s: masker: %s", key.run_id, key.attempt, exc)
                mask = _mask_all
        attempt = _Attempt(
            key,
            namespace,
            tuple(dict(s) for s in (pods_selectors or attempt_selectors(key))),
            pods_dir(self.root, key),
            mask,
        )
        with self._lock:
            if self._stopping.is_set():
                return
            self._attempts[key] = attempt
        self._spawn(lambda: self._discover(attempt), f"pod-logs-list-{key.run_id}")

    def pod_seen(self, pod: Mapping[str, Any], *, deleted: bool = False) -> None:
        """A pod as an informer saw it (``deleted``: a DELETED event). Pods of attempts not
        followed are ignored."""
        try:
            with self._lock:
                attempt = next((a for a in self._attempts.values() if a.selects(pod)), None)
            if attempt is not None:
                self._seen(attempt, pod, deleted)
        except Exception as exc:  # one pod must never break the informer calling us
            log.warning("pod logs: pod %s: %s", _name(pod), exc)

    def unfollow(self, key: AttemptKey) -> None:
        """Stop following the attempt's pods (their archives stay as they are)."""
        with self._lock:
            self._attempts.pop(key, None)
            followers = [f for (k, _), f in self._followers.items() if k == key]
        for follower in followers:
            follower.close()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop every follower (each syncs its archive); waits at most ``timeout_s``."""
        with self._lock:
            self._stopping.set()
            followers = list(self._followers.values())
            threads = list(self._threads)
        for follower in followers:
            follower.close()
        deadline = time.monotonic() + timeout_s
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def following(self) -> int:
        """How many pods are followed now."""
        with self._lock:
            return len(self._followers)

    # -- inside ----------------------------------------------------------------------------
    def _seen(self, attempt: _Attempt, pod: Mapping[str, Any], deleted: bool) -> None:
        meta = pod_meta(pod)
        with self._lock:
            follower = self._followers.get((attempt.key, meta.pod))
            if follower is not None:
                follower.update(pod, deleted)
                return
        if not meta.pod or is_complete(attempt.directory, meta.pod):
            return
        if not deleted and not container_started(pod, meta.container):
            return  # its log does not exist yet: a later event starts the follower
        self._start(attempt, meta, pod, deleted)

    def _start(
        self, attempt: _Attempt, meta: PodMeta, pod: Mapping[str, Any] | None, deleted: bool
    ) -> None:
        fkey = (attempt.key, meta.pod)
        with self._lock:
            if self._stopping.is_set() or fkey in self._followers:
                return
            follower = _PodFollower(self, attempt, meta, pod, deleted)
            self._followers[fkey] = follower
        self._spawn(follower.run, f"pod-logs-{meta.pod}", lambda: self._ended(fkey, follower))

    def _ended(self, fkey: tuple[AttemptKey, str], follower: _PodFollower) -> None:
        with self._lock:
            if self._followers.get(fkey) is follower:
                del self._followers[fkey]

    def _spawn(
        self, target: Callable[[], None], name: str, after: Callable[[], None] | None = None
    ) -> None:
        def run() -> None:
            try:
                target()
            except Exception as exc:  # never raise out of a thread: one line, and done
                log.warning("%s: %s: %s", name, type(exc).__name__, exc)
            finally:
                if after is not None:
                    after()
                with self._lock, contextlib.suppress(ValueError):
                    self._threads.remove(threading.current_thread())

        thread = threading.Thread(target=run, name=name, daemon=True)
        with self._lock:
            self._threads.append(thread)
        thread.start()

    def _discover(self, attempt: _Attempt) -> None:
        listed: dict[str, Mapping[str, Any]] = {}
        for delay in _delays(self.backoff):
            try:
                for sel in attempt.selectors:
                    for pod in self.client.list("v1", "Pod", attempt.namespace, dict(sel)).items:
                        listed[_name(pod)] = pod
                break
            except KubeError as exc:
                log.warning("pod logs of %s: list pods: %s", attempt.namespace, exc)
            if self._stopping.wait(delay):
                return
        for found in listed.values():
            self._seen(attempt, found, deleted=False)
        for meta in read_metas(attempt.directory):  # gone while no one followed them
            if meta.pod not in listed and not is_complete(attempt.directory, meta.pod):
                self._start(attempt, meta, None, deleted=True)


class _PodFollower:
    """One pod's log into its archive (see the module docstring). Runs on its own thread;
    ``update`` and ``close`` come from others."""

    def __init__(
        self,
        owner: PodLogArchiver,
        attempt: _Attempt,
        meta: PodMeta,
        pod: Mapping[str, Any] | None,
        deleted: bool,
    ) -> None:
        self.client = owner.client
        self.backoff = owner.backoff
        self.namespace = attempt.namespace
        self.meta = meta
        self.mask = attempt.mask
        self.archive = PodArchive(attempt.directory, meta)
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._latest = pod
        self._deleted = deleted
        self._stream: Iterator[bytes] | None = None
        self._fragment: bytes | None = None  # an unterminated last piece of a stream
        self._last_error = ""

    @property
    def where(self) -> str:
        return f"{self.namespace}/{self.meta.pod}"

    def update(self, pod: Mapping[str, Any], deleted: bool) -> None:
        with self._lock:
            self._latest = pod
            self._deleted = self._deleted or deleted

    def close(self) -> None:
        with self._lock:
            self._closed.set()
            stream = self._stream
        _close(stream)

    def run(self) -> None:
        try:
            point = self.archive.open()
            delays = _delays(self.backoff)
            while not self._closed.is_set():
                with self._lock:
                    deleted = self._deleted
                if not deleted:
                    try:
                        if self._follow(point):
                            delays = _delays(self.backoff)  # it moved: retry soon again
                    except KubeError as exc:
                        if not isinstance(exc, NotFound):
                            self._note(exc)
                if self._closed.is_set():
                    break
                end = self._end()
                if end is not None and self._final(point, end):
                    return
                self._closed.wait(next(delays))
        finally:
            with contextlib.suppress(OSError):
                self.archive.sync()
            self.archive.close()

    def _follow(self, point: ResumePoint) -> bool:
        """Follow the log to the end of one stream; whether it archived anything."""
        stream = self.client.pod_logs(
            self.namespace,
            self.meta.pod,
            self.meta.container,
            follow=True,
            since_time=point.since_time,
            timestamps=True,
        )
        with self._lock:
            self._stream = stream
        if self._closed.is_set():
            _close(stream)
        moved = False
        keep = ResumeFilter(point)
        self._fragment = None
        try:
            for raw in stream:
                if not raw.endswith(b"\n"):
                    self._fragment = raw  # the last read sends it whole if it is the end
                    continue
                line = self._masked(parse_line(raw, point.ts_ns))
                if keep.admit(line):
                    self.archive.append([line])
                    point.advance(line)
                    moved = True
        finally:
            with self._lock:
                self._stream = None
            _close(stream)
        self._last_error = ""
        return moved

    def _end(self) -> str | None:
        """How the pod ended (its phase, or ``deleted``), or None while it runs."""
        with self._lock:
            if self._deleted:
                return "deleted"
        try:
            pod = self.client.get(ObjectRef("v1", "Pod", self.namespace, self.meta.pod))
        except NotFound:
            return "deleted"
        except KubeError as exc:
            self._note(exc)
            return None
        self.update(pod, False)
        return str(pod["status"]["phase"]) if pod_ended(pod) else None

    def _final(self, point: ResumePoint, end: str) -> bool:
        """Archive what the pod's log holds past ``point`` and complete the archive; False
        when the log could not be read (tried again later)."""
        lines: list[Line] = []
        keep = ResumeFilter(point)
        try:
            raws = self.client.pod_logs(
                self.namespace,
                self.meta.pod,
                self.meta.container,
                follow=False,
                since_time=point.since_time,
                timestamps=True,
            )
            for raw in raws:
                line = self._masked(parse_line(raw, point.ts_ns))
                if keep.admit(line):
                    lines.append(line)
        except NotFound:  # its log went with it: what was archived is all there is
            if self._fragment is not None:
                line = self._masked(parse_line(self._fragment, point.ts_ns))
                lines = [line] if keep.admit(line) else []
        except KubeError as exc:
            self._note(exc)
            return False
        self.archive.append(lines)
        for line in lines:
            point.advance(line)
        self.archive.finish(end)
        return True

    def _masked(self, line: Line) -> Line:
        return line if self.mask is None else replace(line, content=self.mask(line.content))

    def _note(self, exc: KubeError) -> None:
        text = str(exc)
        if text != self._last_error:
            log.warning("pod logs %s: %s", self.where, text)
            self._last_error = text


def _mask_all(line: bytes) -> bytes:
    """Without a working masker, a run with secrets archives no text that could hold one."""
    return b"***\n" if line.strip() else line


def _delays(backoff: Backoff) -> Iterator[float]:
    delay = backoff.initial_s
    while True:
        yield delay
        delay = min(delay * 2, backoff.cap_s)


def _close(stream: Iterator[bytes] | None) -> None:
    closer = getattr(stream, "close", None)
    if closer is not None:
        with contextlib.suppress(Exception):
            closer()


def _name(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("name", "?"))
