"""The policy target port: where a policy's objects are put (a cluster's Kueue objects
and workspace Namespaces), and what there differs from the policy.

Contract for implementations:

- ``apply(policy)`` first renders every object (a policy that cannot be rendered, say a
  workspace whose namespace is no valid name, raises UsageError before anything is
  sent), then applies them one by one in apply order: cluster-scoped kinds first
  (Namespaces, ResourceFlavors, Cohorts, ClusterQueues, WorkloadPriorityClasses), then
  LocalQueues (``policy.cluster_objects.POLICY_KINDS``). It stops at the first object
  that fails, because later objects name earlier ones, and returns an
  :class:`ApplyReport` saying what was applied, which object failed with the API's
  message, and what was not attempted. It never half-applies silently: a failure is
  in the report, never swallowed, and apply itself does not raise for one.
- ``apply`` is idempotent: applying the same policy again changes nothing, and after a
  failed apply, applying again (once the cause is fixed) finishes the job. It never
  deletes: objects the policy no longer has are reported by ``drift`` as left over.
- ``drift(policy)`` reads and changes nothing: each object of the policy that is
  missing or whose fields (those TauGrid sets) differ, then each object labelled
  ``taugrid.io/managed-by: taugrid`` that the policy no longer has. It may raise the
  adapter's error when the target cannot be read.
- Both block (network calls); callers run them off any event loop. Retries are the
  adapter's business.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Protocol

from taugrid.errors import TauError
from taugrid.policy.cluster_objects import ObjectName, apply_rank
from taugrid.policy.drift import Drift
from taugrid.policy.models import Policy

__all__ = ["ApplyReport", "Drift", "ObjectName", "PolicyApplyFailed", "PolicyTarget"]


@dataclass(frozen=True)
class ApplyReport:
    """What one ``apply`` did, in apply order."""

    applied: tuple[ObjectName, ...]
    failed: ObjectName | None = None  # the object that failed; None when all were applied
    error: str = ""  # what the API said about it
    not_applied: tuple[ObjectName, ...] = field(default=())  # after the failed one

    @property
    def ok(self) -> bool:
        return self.failed is None

    def counts(self) -> dict[str, int]:
        """Applied objects per kind, in apply order of the kinds."""
        counted = Counter(o.kind for o in self.applied)
        return {k: counted[k] for k in sorted(counted, key=apply_rank)}

    def applied_words(self) -> str:
        """The applied objects counted in words: ``2 ClusterQueue, 3 LocalQueue``."""
        return ", ".join(f"{n} {k}" for k, n in self.counts().items()) or "nothing"


class PolicyApplyFailed(TauError):
    """A policy's objects could not all be applied; nothing was stored. The message says
    which object failed, why, and what was applied before it."""

    code = "policy_apply_failed"
    http_status = 502  # the cluster refused or failed, not the request itself

    def __init__(self, report: ApplyReport) -> None:
        applied = report.applied_words()
        super().__init__(
            f"policy not applied (nothing stored): {report.failed} failed: {report.error}; "
            f"applied before it: {applied}; not applied: it and {len(report.not_applied)} "
            "after it; fix the cause and apply again (applying is idempotent)"
        )
        self.report = report

    def to_dict(self) -> dict[str, object]:
        return {
            **super().to_dict(),
            "failed": str(self.report.failed),
            "applied": [str(o) for o in self.report.applied],
            "not_applied": [str(o) for o in self.report.not_applied],
        }


class PolicyTarget(Protocol):
    def apply(self, policy: Policy) -> ApplyReport: ...

    def drift(self, policy: Policy) -> list[Drift]: ...
