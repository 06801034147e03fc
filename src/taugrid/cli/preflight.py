"""Ask the server whether a run would be accepted before archiving its workdir.

``POST /api/v1/runs/check`` runs every submit check that needs no snapshot (workspace
and role, queue, priority, whether it can ever fit, secrets, ``rerun_of``, the submit
limits, disk headroom) and records nothing, so a missing secret or a queue that does not
exist is told in milliseconds instead of after seconds of archiving a large workdir.
The submit checks everything again; this only moves the cheap failures first.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from taugrid.domain.workload_env import submitter_env
from taugrid.osuser import current_user

if TYPE_CHECKING:
    from taugrid.cli.client import Client
    from taugrid.spec import LoadedSpec


def submission_body(loaded: LoadedSpec) -> dict[str, Any]:
    """The submit body's fields that need no snapshot (``/runs/check``, ``/runs/dry-run``)."""
    return {
        "spec_source": loaded.source,
        "file_text": loaded.file_text,
        "overrides": loaded.overrides,
        "resolved": loaded.resolved,
        "spec_hash": loaded.spec_hash,
        "submitter": current_user(),
        "env": submitter_env(os.environ),
    }


def check_submission(client: Client, loaded: LoadedSpec) -> dict[str, Any]:
    """Raise the error the submit would raise for this spec; else where it would go:
    ``{"workspace", "queue", "cluster_queue", "priority"}``."""
    body = submission_body(loaded)
    result: dict[str, Any] = client.call("POST", "/runs/check", json_body=body)
    return result
