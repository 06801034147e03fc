"""Crash-safe JSON files: the only channel between the server and a run's supervisor.

The supervisor keeps a private copy of ``write_json_atomic`` (see its module docstring)
so that it can be started without importing the ``taugrid`` package.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from taugrid.fsdurable import fsync_dir

__all__ = ["fsync_dir", "read_json", "write_json_atomic"]


def write_json_atomic(path: Path, data: object) -> None:
    """Write ``data`` as JSON so that readers see the old file or the new one, never a mix.

    Temp file in the same directory, fsync, rename over the target, fsync the directory:
    the new content survives a crash once this returns.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, sort_keys=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def read_json(path: Path) -> Any:
    """Parse a JSON file; raises FileNotFoundError or ValueError like ``json.load``."""
    with open(path, encoding="utf-8") as f:
        return json.load(f)
