"""Drive the real ``tau`` CLI and server processes from tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from leftovers import kill_leftover_supervisors

TAU = [sys.executable, "-m", "taugrid.cli.main"]


@dataclass
class Tau:
    """Runs the CLI against one TAU_HOME and can start, kill and restart its server."""

    home: Path
    cwd: Path
    extra_env: dict[str, str] = field(default_factory=dict)

    def env(self, **more: str) -> dict[str, str]:
        # Let the CLI cache its bytecode even where the shell disables it: 200 CLI runs
        # recompiling the spec package would dominate the suite.
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("TAU_") and k != "PYTHONDONTWRITEBYTECODE"
        }
        # A developer's own ~/.config/tau (a current context) must not redirect the tests.
        config = str(self.home.parent / "tau-config.yaml")
        env.update(TAU_HOME=str(self.home), TAU_CONFIG=config, **self.extra_env, **more)
        return env

    def __call__(
        self,
        *args: str,
        check: bool = False,
        timeout: float = 60,
        cwd: Path | None = None,
        input_text: str | None = None,
        **env: str,
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [*TAU, *args],
            cwd=cwd or self.cwd,
            env=self.env(**env),
            input=input_text,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"tau {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
            )
        return proc

    def json(self, *args: str, **kw: Any) -> Any:
        """Run with ``-o json`` (placed before any ``--``) and parse the output."""
        argv = list(args)
        at = argv.index("--") if "--" in argv else len(argv)
        argv[at:at] = ["-o", "json"]
        return json.loads(self(*argv, check=True, **kw).stdout)

    def server_info(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.home / "server.json").read_text())
        return data

    def token(self) -> str:
        return (self.home / "token").read_text().strip()

    def start_server(self, *args: str) -> dict[str, Any]:
        self("server", "start", *args, check=True)
        return self.server_info()

    def kill_server(self) -> None:
        pid = int(self.server_info()["pid"])
        os.kill(pid, signal.SIGKILL)
        wait_gone(pid)

    def stop_server(self) -> None:
        self("server", "stop")

    def tear_down(self) -> None:
        """After a test: the server it left running is stopped, its supervisors killed."""
        try:
            info = self.server_info()
        except OSError:
            info = None
        if info:
            try:
                os.kill(int(info["pid"]), signal.SIGTERM)
                wait_gone(int(info["pid"]))
            except ProcessLookupError:
                pass
        kill_leftover_supervisors(self.home)

    def wait_state(self, run: str, states: set[str], timeout: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            data: dict[str, Any] = self.json("status", run)
            if data["state"] in states:
                return data
            if time.monotonic() > deadline:
                raise AssertionError(f"{run} stuck in {data['state']}, wanted {states}")
            time.sleep(0.1)


def wait_gone(pid: int, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.02)
    raise AssertionError(f"pid {pid} still alive")


def write_spec(dirpath: Path, text: str, name: str = "tau.yaml") -> Path:
    dirpath.mkdir(parents=True, exist_ok=True)
    path = dirpath / name
    path.write_text(text)
    return path
