"""Golden files of rendered Kubernetes objects: the whole object as YAML, compared byte for
byte, so any change to what a renderer emits is seen in review. ``TAU_UPDATE_GOLDEN=1``
rewrites the files instead (then read the diff)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml


def assert_golden(path: Path, objects: dict[str, Any] | Sequence[dict[str, Any]]) -> None:
    many = not isinstance(objects, dict)
    text = (
        yaml.safe_dump_all(list(objects), sort_keys=False)
        if many
        else yaml.safe_dump(objects, sort_keys=False)
    )
    if os.environ.get("TAU_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"{path.name} changed: TAU_UPDATE_GOLDEN=1 rewrites it"
