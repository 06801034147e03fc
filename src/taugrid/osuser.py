"""The name of the OS user this process runs as. Stdlib only: the CLI imports this.

``getpass.getuser()`` raises for a uid that has no passwd entry when none of LOGNAME, USER,
LNAME and USERNAME is set: what a hardened pod gives a container (an arbitrary uid, no
``USER``). Nothing may call it at import time, and nothing may fail for want of a name.
"""

from __future__ import annotations

import getpass
import os


def current_user() -> str:
    """The login name, else ``uid-N`` for a uid without one."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # KeyError up to 3.12, OSError from 3.13
        return f"uid-{os.getuid()}"
