"""The policy file a server applies at start (``--policy-file``, ``TAU_POLICY_FILE``): the
Helm chart mounts the platform's policy at ``/etc/taugrid/policy.yaml``, so the policy
in force follows the chart's values without anybody running ``tau admin policy apply``.

At start the file is read and validated before the server binds its port
(:func:`policy_file_problem`: a bad file stops the start with its first
``file:line:col`` problem on one line). Once the store and the cluster adapters exist,
:func:`apply_policy_file` records it exactly as ``tau admin policy apply`` does
(``Queueing.apply``: on a cluster the Kueue objects first, through the policy target;
then stored and in force), applied by ``policy-file``, with an audit entry; when its
text is the policy in force's, nothing new is recorded (a restart changes nothing). An
apply the cluster refuses is logged and leaves the policy in force as it was; the
server still starts (a Recreate Deployment would otherwise have no server at all), and
``tau admin cluster check`` shows the failure in its ``policy-file`` line.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from taugrid.errors import SpecError, TauError
from taugrid.policy import load_policy_text
from taugrid.server.queueing import Queueing
from taugrid.spec.yamlsrc import read_text
from taugrid.store.identity import IdentityStore

log = logging.getLogger("taugrid.server")

APPLIED_BY = "policy-file"
APPLIED, UNCHANGED, FAILED = "applied", "unchanged", "failed"


@dataclass(frozen=True)
class PolicyFileStart:
    """What came of the policy file at this start (``tau admin cluster check`` shows it)."""

    path: str
    outcome: str  # applied | unchanged | failed
    error: str = ""
    text: str | None = None  # the file's text as read at start


def needs_apply(file_text: str, in_force_text: str | None) -> bool:
    """Whether the file's text is to be recorded: it differs from the policy in force's
    (None: the built-in default, which no file is)."""
    return file_text != in_force_text


def one_line(exc: SpecError) -> str:
    """A bad policy's first problem (``file:line:col: field: message``) on one line."""
    if not exc.problems:
        return exc.message.splitlines()[0] if exc.message else "invalid policy"
    first = " ".join(str(exc.problems[0]).split())
    more = len(exc.problems) - 1
    if more:
        first += f" (and {more} more: tau admin policy validate {exc.problems[0].file})"
    return first


def policy_file_problem(path: Path) -> str | None:
    """Why the server must not start with this policy file (one line), or None."""
    try:
        load_policy_text(read_text(path), str(path))
    except SpecError as exc:
        return one_line(exc)
    return None


def apply_policy_file(
    path: Path, queueing: Queueing, identity: IdentityStore | None = None
) -> PolicyFileStart:
    """Put the file in force unless it already is; never raises for the file or the
    cluster (what failed is in the answer and the log)."""
    source = str(path)
    try:
        text = read_text(path)
        if not needs_apply(text, queueing.policy.text):
            log.info("policy file %s is the policy in force: nothing applied", source)
            return PolicyFileStart(source, UNCHANGED, text=text)
        done = queueing.apply(text, source, applied_by=APPLIED_BY)
    except SpecError as exc:
        error = one_line(exc)
    except TauError as exc:
        error = " ".join(exc.message.split())
    else:
        detail = None
        if done.cluster is not None:
            detail = "applied to the cluster: " + done.cluster.applied_words()
        _audit(identity, source, "ok", detail)
        log.info("policy file %s applied at start (hash %s)", source, (done.policy.hash or "")[:12])
        return PolicyFileStart(source, APPLIED, text=text)
    _audit(identity, source, "policy_apply_failed", error)
    log.error("policy file %s not applied at start: %s", source, error)
    return PolicyFileStart(source, FAILED, error=error)


def _audit(identity: IdentityStore | None, source: str, outcome: str, detail: str | None) -> None:
    if identity is None:
        return
    try:
        identity.audit(
            {
                "actor": APPLIED_BY,
                "action": "policy.apply",
                "target": source,
                "workspace": None,
                "source": None,
                "outcome": outcome,
                "detail": detail[:1000] if detail else None,
            }
        )
    except Exception:  # the audit row is a record of the start, never a reason to stop it
        log.exception("recording the policy file's apply in the audit log")
