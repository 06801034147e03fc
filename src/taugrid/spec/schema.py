"""The JSON Schema of tau.yaml, published by ``tau schema`` so editors complete and check it.

Derived from the models, so it cannot drift from what the loader accepts. The loader's
checks that a schema cannot express (reserved ``TAU_`` names, ``..`` in outputs, the
workdir existing) still give their own messages.
"""

from __future__ import annotations

from typing import Any

from taugrid.spec.models import TauSpec

DRAFT = "https://json-schema.org/draft/2020-12/schema"


def json_schema() -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of tau.yaml, with a description on every field."""
    schema = TauSpec.model_json_schema(mode="validation")
    return {"$schema": DRAFT, **schema}
