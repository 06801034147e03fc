"""Hashes that identify what a submission asks for. Pure.

``spec_hash`` is the hash the loader records for a resolved spec (sha256 of its canonical
JSON); the server recomputes it rather than trusting the client's. ``request_hash`` is
what an idempotency key is bound to: a reused key must come with the same request.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any


def canonical_json(data: Any) -> str:
    """One text per value: sorted keys, no spaces, UTF-8 as is."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _sha256(text: str) -> str:
    # surrogatepass: a lone surrogate is refused elsewhere, hashing must not crash first.
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def spec_hash(resolved: Mapping[str, Any]) -> str:
    """sha256 hex of the resolved spec's canonical JSON (what ``LoadedSpec.spec_hash`` is)."""
    return _sha256(canonical_json(resolved))


def request_hash(resolved: Mapping[str, Any], snapshot_digest: str, rerun_of: str | None) -> str:
    """What a submission asks to run: the resolved spec (workspace, command, environment,
    resources...), the code and the run it reruns. The records that only describe the
    submitter's machine (its environment summary, git and Python records, the spec file
    text and ``--set`` texts that led to ``resolved``) are left out, so a CI retry from
    another runner with the same spec and code is the same request."""
    return _sha256(
        canonical_json(
            {"resolved": resolved, "snapshot_digest": snapshot_digest, "rerun_of": rerun_of}
        )
    )
