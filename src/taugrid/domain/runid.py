"""Run ids: ``<name>-<5 random chars>``, a DNS-1123 label (usable as a Kubernetes name)."""

from __future__ import annotations

import re
import secrets

_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"
SUFFIX_LEN = 5
DNS1123_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def new_run_id(name: str) -> str:
    suffix = "".join(secrets.choice(_ALPHABET) for _ in range(SUFFIX_LEN))
    run_id = f"{name}-{suffix}"
    if len(run_id) > 63 or not DNS1123_LABEL.match(run_id):
        raise ValueError(f"run name {name!r} does not make a valid DNS-1123 run id")
    return run_id
