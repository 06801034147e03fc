"""``should_stop()``: true once SIGTERM arrived (a cancel, a preemption, a timeout).

Importing this module (``taugrid.should_stop`` does) installs a SIGTERM handler that sets
a flag, if the process has none yet (``SIG_DFL``) and this is the main thread; a handler
the program installed before is kept and called after the flag is set. From then on
SIGTERM no longer ends the process by itself: the workload is expected to notice
``should_stop()``, save a checkpoint and exit. If it does not, the executor sends SIGKILL
after the run's ``stop_grace`` (default 60 s) anyway. A program that set SIGTERM to
``SIG_IGN`` is left alone (``should_stop()`` then stays false). Stdlib only.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

_stop = threading.Event()
_installed = False
_previous: Callable[[int, FrameType | None], Any] | None = None


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    _stop.set()
    if _previous is not None:
        _previous(signum, frame)


def install() -> bool:
    """Install the SIGTERM handler if possible; True if it is in place."""
    global _installed, _previous
    if _installed:
        return True
    if threading.current_thread() is not threading.main_thread():
        return False
    current = signal.getsignal(signal.SIGTERM)
    if current is _on_sigterm:
        _installed = True
        return True
    if current == signal.SIG_DFL:
        _previous = None
    elif callable(current):
        _previous = current
    else:  # SIG_IGN, or a handler installed from C (None)
        return False
    signal.signal(signal.SIGTERM, _on_sigterm)
    _installed = True
    return True


def should_stop() -> bool:
    """True once SIGTERM has arrived: finish the step, save a checkpoint, exit."""
    if not _installed:
        install()
    return _stop.is_set()


install()
