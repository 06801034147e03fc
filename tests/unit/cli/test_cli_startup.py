"""The CLI's start-up path stays light, and the fast help is the same as click's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from taugrid.cli.app import cli
from taugrid.cli.fasthelp import render
from taugrid.cli.registry import COMMANDS

HEAVY = (
    "sqlalchemy",
    "fastapi",
    "uvicorn",
    "alembic",
    "psycopg",
    "taugrid.server",
    "taugrid.store",
    "lightkube",
    "kubernetes",
    "rich",
    "pydantic",
)


def test_fast_help_matches_click_rendering() -> None:
    result = CliRunner().invoke(cli, ["--help"], prog_name="tau", terminal_width=80)
    assert result.exit_code == 0
    assert result.output == render()


def test_registry_help_matches_each_command() -> None:
    for name, (_, short) in COMMANDS.items():
        cmd = cli.get_command(None, name)  # type: ignore[arg-type]
        assert cmd is not None
        assert (cmd.help or "").strip().splitlines()[0] == short, name


def _imported_modules(tmp_path: Path, *args: str) -> set[str]:
    """Run the real entry point in a fresh interpreter and list what it imported."""
    dump = tmp_path / "modules.json"
    code = (
        "import atexit, json, sys\n"
        f"out = {str(dump)!r}\n"
        "atexit.register(lambda: open(out, 'w').write(json.dumps(sorted(sys.modules))))\n"
        f"sys.argv = ['tau', *{list(args)!r}]\n"
        "from taugrid.cli.main import main\n"
        "main()\n"
    )
    env = {**os.environ, "TAU_SERVER_URL": "http://127.0.0.1:1", "TAU_TOKEN": "x"}
    subprocess.run(
        [sys.executable, "-c", code], capture_output=True, env=env, check=False, timeout=30
    )
    return set(json.loads(dump.read_text()))


def test_help_imports_neither_click_nor_heavy_libraries(tmp_path: Path) -> None:
    mods = _imported_modules(tmp_path, "--help")
    assert "click" not in mods
    assert not {m for m in mods if m.startswith(HEAVY)}


def test_status_imports_no_server_database_or_kubernetes_library(tmp_path: Path) -> None:
    mods = _imported_modules(tmp_path, "status")
    assert "taugrid.cli.commands.status" in mods
    assert not {m for m in mods if m.startswith(HEAVY)}


def test_render_needs_no_server_and_no_kubernetes_library(tmp_path: Path) -> None:
    (tmp_path / "tau.yaml").write_text("name: r\nimage: python:3.12\ncommand: [python, a.py]\n")
    mods = _imported_modules(tmp_path, "render", str(tmp_path / "tau.yaml"))
    assert "taugrid.manifests.plan" in mods  # it did render (pydantic: it loads a spec)
    assert not {m for m in mods if m.startswith(HEAVY) and not m.startswith("pydantic")}
