"""The server's mode and capabilities, as the CLI learns them (``taugrid.spec.modes``).

``tau run`` costs nothing extra: ``POST /runs/check``, asked anyway before archiving,
refuses what the mode refuses (with the sentences of ``spec/modes.py``) and answers the
capabilities, which the notes are printed from. ``tau validate`` asks ``GET /server``
of a server that is there, and never starts one: the local context without a running
server is local mode; a remote server that cannot be asked leaves the mode unchecked.
A server that does not know the route (an older version: 404), or answers no
capabilities, runs in local mode.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from taugrid.errors import NotFound, TauError
from taugrid.spec.modes import LOCAL, Capabilities

if TYPE_CHECKING:
    from taugrid.cli.client import Client

ASK_TIMEOUT_S = 3.0  # validate asks a server that may be far away, or gone


class Mode(NamedTuple):
    """What ``tau validate`` checks against: the capabilities (None: not checked) and,
    when they could not be learnt, the note saying why."""

    capabilities: Capabilities | None
    note: str | None = None


def from_check(result: Mapping[str, Any]) -> Capabilities:
    """The capabilities in a ``POST /runs/check`` answer (LOCAL from an older server)."""
    return Capabilities.from_dict(result.get("capabilities"))


def ask(client: Client, timeout: float = ASK_TIMEOUT_S) -> Capabilities:
    """``GET /api/v1/server``'s capabilities; a server without the route is LOCAL."""
    try:
        data = client.call("GET", "/server", timeout=timeout)
    except NotFound:
        return LOCAL
    return Capabilities.from_dict(data.get("capabilities") if isinstance(data, dict) else None)


def for_validate() -> Mode:
    """The mode of the selected context's server, without starting one."""
    from taugrid.cli.client import Client
    from taugrid.cli.connect import read_token, running_server, selected
    from taugrid.home import tau_home

    ctx = selected().context
    if ctx.server is None:  # the local context: local mode unless its server says more
        home = tau_home()
        info = running_server(home)
        if info is None:
            return Mode(LOCAL)
        try:
            return Mode(ask(Client(str(info["url"]), read_token(home))))
        except TauError:
            return Mode(LOCAL)
    try:
        return Mode(ask(Client(ctx.server, ctx.token)))
    except TauError as exc:
        return Mode(None, f"mode not checked (context {ctx.name}): {exc.message}")
