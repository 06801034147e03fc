"""Every command of the README's tour runs as written, in order, on this (CPU-only as far
as the tour knows) machine: the code blocks are read from README.md itself, so the README
cannot drift from what works."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from leftovers import kill_leftover_supervisors

ROOT = Path(__file__).resolve().parents[2]
SECTION = "## A 5-minute tour"


def tour_commands(readme: str) -> list[str]:
    """The shell lines of the tour's ```sh blocks, comments stripped, in order."""
    section = readme.split(SECTION, 1)[1].split("\n## ", 1)[0]
    lines: list[str] = []
    for block in re.findall(r"```sh\n(.*?)```", section, flags=re.DOTALL):
        for line in block.splitlines():
            command = re.sub(r"\s+#.*$", "", line).strip()  # the tour quotes no '#'
            if command:
                lines.append(command)
    return lines


def test_the_tour_is_read_from_the_readme() -> None:
    commands = tour_commands((ROOT / "README.md").read_text())
    assert commands[0] == "cd examples/quickstart"
    assert "tau admin policy apply policy.yaml" in commands
    assert len(commands) > 20


@pytest.mark.e2e
@pytest.mark.timeout(400)
def test_every_tour_command_runs_as_written(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "examples", repo / "examples")
    shutil.copy(ROOT / "README.md", repo / "README.md")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAU_")}
    env.update(
        TAU_HOME=str(tmp_path / "home"),
        TAU_CONFIG=str(tmp_path / "tau-config.yaml"),  # not the developer's contexts
        # `source .venv/bin/activate`: this interpreter's bin (tau, python) comes first.
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', os.defpath)}",
        NO_COLOR="1",
    )
    cwd = repo
    try:
        for command in tour_commands((repo / "README.md").read_text()):
            if command.startswith("cd "):
                cwd = (cwd / command[3:].strip()).resolve()
                assert cwd.is_dir(), command
                continue
            done = subprocess.run(
                ["bash", "-c", command],
                cwd=cwd,
                env=env,
                input="hf_example-not-a-real-token\n",  # `tau secret set` reads stdin
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert done.returncode == 0, f"{command!r} exited {done.returncode}:\n" + (
                done.stdout[-2000:] + done.stderr[-2000:]
            )
        quickstart = repo / "examples" / "quickstart"
        assert (quickstart / "tau.schema.json").stat().st_size > 0
        assert (quickstart / "starter" / "train.py").exists()
        runs = json.loads(
            subprocess.run(
                ["tau", "list", "-o", "json", "--limit", "100"],
                cwd=quickstart,
                env=env,
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )["runs"]
        by_name = {r["name"]: r for r in reversed(runs)}  # the newest of each name
        assert by_name["quickstart"]["state"] == "SUCCEEDED"
        assert by_name["nap"]["state"] == "CANCELLED"
        assert by_name["lr-0-1"]["state"] == "SUCCEEDED"
    finally:
        info = tmp_path / "home" / "server.json"
        if info.exists():
            os.kill(json.loads(info.read_text())["pid"], signal.SIGTERM)
        kill_leftover_supervisors(tmp_path / "home")
