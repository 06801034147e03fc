"""``GET /api/v1/server``: the server's mode and capabilities, for any caller with a token
(``tau validate`` checks a spec against them; ``tau run`` gets them with ``/runs/check``)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from taugrid import __version__
from taugrid.server.schemas import CapabilitiesOut, ServerInfoOut
from taugrid.spec.modes import Capabilities

router = APIRouter(prefix="/api/v1")


def capabilities_out(caps: Capabilities) -> CapabilitiesOut:
    return CapabilitiesOut.model_validate(caps.to_dict())


@router.get("/server", response_model=ServerInfoOut)
def server_info(request: Request) -> ServerInfoOut:
    """The mode this server runs in and what that mode accepts of a spec."""
    caps: Capabilities = request.app.state.capabilities
    return ServerInfoOut(mode=caps.mode, capabilities=capabilities_out(caps), version=__version__)
