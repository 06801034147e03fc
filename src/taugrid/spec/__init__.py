"""``tau.yaml``: models, loader with positions, ``--set`` overrides, JSON Schema.

The public surface other packages use; everything else in this package is internal.
"""

from taugrid.spec.expand import EXPANSION_RULES, expand_at_launch
from taugrid.spec.loader import LoadedSpec, load_spec, spec_from_command
from taugrid.spec.models import TauSpec
from taugrid.spec.modes import Capabilities, inactive_fields, refusal, refusals
from taugrid.spec.schema import json_schema
from taugrid.spec.starter import STARTER_TAU_YAML
from taugrid.spec.units import parse_duration, quantity_bytes

__all__ = [
    "EXPANSION_RULES",
    "STARTER_TAU_YAML",
    "Capabilities",
    "LoadedSpec",
    "TauSpec",
    "expand_at_launch",
    "inactive_fields",
    "json_schema",
    "load_spec",
    "parse_duration",
    "quantity_bytes",
    "refusal",
    "refusals",
    "spec_from_command",
]
