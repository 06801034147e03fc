"""Putting the portal on the app: its routers, its static files, its error pages."""

from __future__ import annotations

from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.responses import RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from taugrid.errors import TauError
from taugrid.server.portal import actions, live, login, pages
from taugrid.server.portal.access import NeedLogin
from taugrid.server.portal.web import STATIC_DIR, page
from taugrid.server.portal_session import Tickets

PREFIX = "/portal"


def mount_portal(app: FastAPI) -> None:
    app.state.portal_tickets = Tickets()
    app.include_router(login.router)
    app.include_router(pages.router)
    app.include_router(actions.router)
    app.include_router(live.router)
    app.mount(f"{PREFIX}/static", StaticFiles(directory=STATIC_DIR), name="portal-static")

    @app.get("/", include_in_schema=False)
    def root() -> Response:
        return RedirectResponse(f"{PREFIX}/", status_code=302)


def error_page(request: Request, exc: TauError) -> Response | None:
    """An error on a portal path as a page: the API's code and message, the API's status;
    no session: the login page (htmx is told to go there)."""
    path = request.url.path
    if path != PREFIX and not path.startswith(f"{PREFIX}/"):
        return None
    if isinstance(exc, NeedLogin):
        target = (
            f"{PREFIX}/login?next={quote(path)}" if request.method == "GET" else f"{PREFIX}/login"
        )
        if request.headers.get("hx-request"):
            return Response(status_code=401, headers={"HX-Redirect": target})
        return login.login_page(request, exc.message, path, 401)
    return page(
        "error.html",
        {"error": exc.to_dict(), "status": exc.http_status, "caller": None, "nav": ""},
        exc.http_status,
    )
