"""Archiving the logs of the attempts' pods: one follower thread a pod (``logfollower``).

Whoever owns the attempt (the executor) calls :meth:`PodLogArchiver.follow` once it has
created the attempt's objects, feeds :meth:`PodLogArchiver.pod_seen` from its pod
informer, :meth:`PodLogArchiver.release` once the attempt is over, and
:meth:`PodLogArchiver.stop` at shutdown. ``follow``, ``pod_seen`` and ``release`` never
block (the API calls happen on the archiver's threads) and never raise: an API error is
logged on one line (again only when it changes) and retried with capped backoff.

A pod is followed once its container has started (a waiting one has no log yet); its
follower ends by itself when the pod has ended and its archive is complete. ``follow``
lists the attempt's pods once, so pods that exist already are found without waiting for
the informer, and completes the archives of pods that vanished while no server followed
them (what was archived is all there is: the kubelet forgets a deleted pod's log).

Secret values are masked in what is archived when ``follow`` is given them, by the masker
the composition root supplies (``make_masker``): the local executor's ``logmask`` is the
one implementation, and the two executors may not import each other.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from taugrid.errors import TauError
from taugrid.executors.kubernetes.client import KubeClient, KubeError
from taugrid.executors.kubernetes.logarchive import is_complete, pods_dir, read_metas
from taugrid.executors.kubernetes.logfollower import LineMask, PodFollower, Timing
from taugrid.executors.kubernetes.loglines import (
    JOB_NAME_LABEL,
    PodMeta,
    container_started,
    pod_meta,
)
from taugrid.manifests.workloads import job_name
from taugrid.ports.executor import AttemptKey

__all__ = ["LineMask", "MaskerFactory", "PodLogArchiver", "Timing", "attempt_selectors"]

log = logging.getLogger(__name__)

MaskerFactory = Callable[[Sequence[str]], LineMask]
"""Given a run's secret values, a function masking them in one line."""

DEFAULT_TIMING = Timing()
WATCHDOG_S = 5.0  # how often the followers' streams are looked at (``PodFollower.check``)


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


class PodLogArchiver:
    """See the module docstring. ``root`` is the runs directory (``pods_dir`` layout)."""

    def __init__(
        self,
        client: KubeClient,
        root: Path,
        *,
        make_masker: MaskerFactory | None = None,
        timing: Timing = DEFAULT_TIMING,
        watchdog_s: float = WATCHDOG_S,
    ) -> None:
        self.client = client
        self.root = root
        self.make_masker = make_masker
        self.timing = timing
        self.watchdog_s = watchdog_s
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._attempts: dict[AttemptKey, _Attempt] = {}
        self._followers: dict[tuple[str, str], PodFollower] = {}  # (namespace, pod)
        self._threads: list[threading.Thread] = []
        self._watchdog: threading.Thread | None = None

    def follow(
        self,
        key: AttemptKey,
        namespace: str,
        pods_selectors: Sequence[Mapping[str, str]] | None = None,
        *,
        secrets: Sequence[str] = (),
    ) -> None:
        """Archive the logs of the attempt's pods in ``namespace``: those carrying all the
        labels of any of ``pods_selectors`` (default: ``attempt_selectors(key)``)."""
        attempt = _Attempt(
            key,
            namespace,
            tuple(dict(s) for s in (pods_selectors or attempt_selectors(key))),
            pods_dir(self.root, key),
            self._masker(key, secrets),
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
            meta = pod.get("metadata") or {}
            where = (str(meta.get("namespace", "")), str(meta.get("name", "")))
            with self._lock:
                follower = self._followers.get(where)
                attempt = next((a for a in self._attempts.values() if a.selects(pod)), None)
            if follower is not None:
                follower.update(pod, deleted)
            elif attempt is not None:
                self._seen(attempt, pod, deleted)
        except Exception as exc:  # one pod must never break the informer calling us
            log.warning("pod logs: pod %s: %s", _name(pod), exc)

    def release(self, key: AttemptKey) -> None:
        """The attempt is over: no new pod of it is followed; the followers of its pods
        finish by themselves (when their pods have ended)."""
        with self._lock:
            self._attempts.pop(key, None)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop every follower (each syncs its archive, complete or not: the next start
        resumes it); waits for their threads at most ``timeout_s``."""
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
    def _masker(self, key: AttemptKey, secrets: Sequence[str]) -> LineMask | None:
        if not secrets:
            return None
        if self.make_masker is not None:
            try:
                return self.make_masker(secrets)
            except Exception as exc:  # the caller must not fail for it
                log.warning("pod logs of %s/%s: masker: %s", key.run_id, key.attempt, exc)
        else:
            log.warning("pod logs of %s/%s: secrets but no masker", key.run_id, key.attempt)
        return _mask_all

    def _seen(self, attempt: _Attempt, pod: Mapping[str, Any], deleted: bool) -> None:
        meta = pod_meta(pod)
        if not meta.pod or is_complete(attempt.directory, meta.pod):
            return
        if not deleted and not container_started(pod, meta.container):
            return  # its log does not exist yet: a later event starts the follower
        self._start(attempt, meta, deleted)

    def _start(self, attempt: _Attempt, meta: PodMeta, deleted: bool) -> None:
        where = (attempt.namespace, meta.pod)
        follower = PodFollower(
            self.client,
            attempt.namespace,
            attempt.directory,
            meta,
            mask=attempt.mask,
            timing=self.timing,
            deleted=deleted,
        )
        with self._lock:
            if self._stopping.is_set() or where in self._followers:
                return
            self._followers[where] = follower
            if self._watchdog is None:
                self._watchdog = self._spawn(self._watch, "pod-logs-watchdog", locked=True)

        def ended() -> None:
            with self._lock:
                if self._followers.get(where) is follower:
                    del self._followers[where]

        self._spawn(follower.run, f"pod-logs-{meta.pod}", after=ended)

    def _spawn(
        self,
        target: Callable[[], None],
        name: str,
        after: Callable[[], None] | None = None,
        locked: bool = False,
    ) -> threading.Thread:
        def run() -> None:
            try:
                target()
            except Exception as exc:  # never out of a thread: one line, and it is over
                log.warning("%s: %s: %s", name, type(exc).__name__, exc)
            finally:
                if after is not None:
                    after()
                with self._lock, contextlib.suppress(ValueError):
                    self._threads.remove(thread)

        thread = threading.Thread(target=run, name=name, daemon=True)
        if locked:
            self._threads.append(thread)
        else:
            with self._lock:
                self._threads.append(thread)
        thread.start()
        return thread

    def _watch(self) -> None:
        while not self._stopping.wait(self.watchdog_s):
            with self._lock:
                followers = list(self._followers.values())
            now = time.monotonic()
            for follower in followers:
                follower.check(now)

    def _discover(self, attempt: _Attempt) -> None:
        listed: dict[str, Mapping[str, Any]] = {}
        said = ""
        for delay in self.timing.delays():
            try:
                for sel in attempt.selectors:
                    for pod in self.client.list("v1", "Pod", attempt.namespace, dict(sel)).items:
                        listed[_name(pod)] = pod
                break
            except KubeError as exc:
                if str(exc) != said:
                    log.warning("pod logs of %s: %s", attempt.key.run_id, exc)
                    said = str(exc)
            if self._stopping.wait(delay):
                return
        for found in listed.values():
            self.pod_seen(found)
        for meta in read_metas(attempt.directory):  # gone while no one followed them
            if meta.pod not in listed and not is_complete(attempt.directory, meta.pod):
                self._start(attempt, meta, deleted=True)


def _mask_all(line: bytes) -> bytes:
    """Without a working masker, a run with secrets archives no text that could hold one."""
    return b"***\n" if line.strip() else line


def _name(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("name", "?"))
