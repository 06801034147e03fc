"""The platform policy (``policy.yaml``, DESIGN 3.5): models, loader with positions, the
built-in default, the scheduler's view of it, and its Kueue v1beta2 objects.

The public surface other packages use; everything else in this package is internal.
"""

from taugrid.policy.defaults import default_policy
from taugrid.policy.domain import DomainPolicy, to_domain
from taugrid.policy.kueue import namespace_for, render_kueue, to_yaml
from taugrid.policy.loader import (
    LoadedPolicy,
    dump_policy,
    load_policy,
    load_policy_text,
    policy_hash,
)
from taugrid.policy.models import Policy

__all__ = [
    "DomainPolicy",
    "LoadedPolicy",
    "Policy",
    "default_policy",
    "dump_policy",
    "load_policy",
    "load_policy_text",
    "namespace_for",
    "policy_hash",
    "render_kueue",
    "to_domain",
    "to_yaml",
]
