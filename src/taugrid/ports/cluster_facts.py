"""The cluster facts port: what ``tau admin cluster check`` reads of a cluster (API
versions, the add-ons' CRDs, webhooks and controllers, the nodes, the health agents'
pods), as plain data for the pure verdict (``domain.cluster_readiness``).

Contract for implementations:

- ``facts()`` reads and changes nothing. It never raises for one fact it cannot read
  (a 403, a kind the cluster lacks): that fact is None in the answer and
  ``ClusterFacts.errors`` says why under the fact's name, so the verdict says what it
  could not check and how to allow it. It may raise only for a bug.
- It blocks (several list calls); callers run it off any event loop.
"""

from __future__ import annotations

from typing import Protocol

from taugrid.domain.cluster_facts import ClusterFacts

__all__ = ["ClusterFacts", "ClusterInspector"]


class ClusterInspector(Protocol):
    def facts(self) -> ClusterFacts: ...
