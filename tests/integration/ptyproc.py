"""The real ``tau`` CLI on a pseudo-terminal, as a person at a terminal runs it.

stdin, stdout and stderr are the pty's slave side; a thread drains the master side (a
full pty buffer would block the CLI) into :attr:`TtyProc.output`. The process is the
leader of a session of its own, so a test can send it SIGINT as Ctrl-C does
(``os.killpg``) without touching pytest.
"""

from __future__ import annotations

import os
import pty
import signal
import subprocess
import threading
import time
from pathlib import Path

from tauproc import TAU, Tau


class TtyProc:
    def __init__(self, tau: Tau, *args: str, cwd: Path | None = None) -> None:
        master, slave = pty.openpty()
        self._master = master
        self.proc = subprocess.Popen(
            [*TAU, *args],
            cwd=cwd or tau.cwd,
            env=tau.env(TERM="xterm", COLUMNS="200"),
            stdin=slave,
            stdout=slave,
            stderr=slave,
            start_new_session=True,
        )
        os.close(slave)
        self._chunks: list[bytes] = []
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        while True:
            try:
                data = os.read(self._master, 65536)
            except OSError:  # EIO: every slave side is closed
                break
            if not data:
                break
            self._chunks.append(data)

    @property
    def output(self) -> str:
        return b"".join(self._chunks).decode(errors="replace")

    def wait_for_text(self, text: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.output:
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} never appeared; output so far:\n{self.output}")
            if self.proc.poll() is not None and text not in self.output:
                self._reader.join(timeout=2)
                if text in self.output:
                    return
                raise AssertionError(
                    f"exited {self.proc.returncode} before {text!r}:\n{self.output}"
                )
            time.sleep(0.05)

    def interrupt(self) -> None:
        """Ctrl-C: SIGINT to the CLI's process group."""
        os.killpg(self.proc.pid, signal.SIGINT)

    def wait(self, timeout: float = 60) -> int:
        rc = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=5)
        return rc

    def kill(self) -> None:
        """Make sure it is gone (a failed test must not leave it behind); close the pty."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        self._reader.join(timeout=5)
        if self._master >= 0:
            os.close(self._master)
            self._master = -1
