"""A real Chromium on the portal, for tests/e2e/test_portal_browser.py: skipping when no
browser is here, logging a browser in through `tau portal --url`, and watching every page
for console errors, uncaught exceptions and Content-Security-Policy violations.

Playwright's sync API is used directly (no pytest plugin): one browser per test module,
a context (cookies) per caller, a page per visit."""

from __future__ import annotations

import importlib.util
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servicecheck import require_service

# The real-CLI helpers live beside the integration tests; this directory is collected
# first, so their folder may not be on sys.path yet.
_INTEGRATION = str(Path(__file__).resolve().parents[1] / "integration")
if _INTEGRATION not in sys.path:
    sys.path.insert(0, _INTEGRATION)

from tauproc import Tau  # noqa: E402

if TYPE_CHECKING:
    from playwright.sync_api import Browser, BrowserContext, ConsoleMessage, Page, Response

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "portal"
CHROMIUM = os.environ.get("TAU_TEST_CHROMIUM", "/usr/bin/chromium")
DESKTOP = {"width": 1280, "height": 900}
NARROW = {"width": 375, "height": 812}
WAIT_MS = 20_000  # what the page may take to show what the server already did

# Runs before any page script (Playwright injects it; the page's CSP does not apply):
# counts the SSE streams htmx opened, and reports CSP violations as console errors
# (Chromium logs them too; this also catches any that a future Chromium stops logging).
INIT_SCRIPT = """
window.__tau = {sseOpen: 0};
document.addEventListener("htmx:sseOpen", () => { window.__tau.sseOpen += 1; });
document.addEventListener("securitypolicyviolation", (e) => {
  const on = e.target && e.target.outerHTML ? e.target.outerHTML.slice(0, 120) : "the document";
  const what = `CSP violation: ${e.violatedDirective} blocked ${e.blockedURI || "inline"} on ${on}`;
  console.error(what);
});
"""


def require_browser() -> None:
    require_service(
        importlib.util.find_spec("playwright") is not None,
        "playwright is not installed (pip install -e '.[dev]')",
    )
    require_service(
        os.access(CHROMIUM, os.X_OK),
        f"no Chromium at {CHROMIUM} (apt-get install chromium, or set TAU_TEST_CHROMIUM)",
    )


def launch(playwright: Any) -> Browser:
    args = ["--no-sandbox"] if os.geteuid() == 0 else []  # Chromium's sandbox refuses root
    browser: Browser = playwright.chromium.launch(
        executable_path=CHROMIUM, headless=True, args=args
    )
    return browser


def login_link(tau: Tau, page: str = "/portal/", **env: str) -> str:
    """A one-time login link from the real CLI, as the caller ``env`` names."""
    link = tau("portal", "--url", "--page", page, check=True, **env).stdout.strip()
    assert link.startswith("http") and "/portal/login?ticket=" in link, link
    return link


@dataclass
class Portal:
    """One caller's browser context on one server, and what its pages reported."""

    context: BrowserContext
    base: str
    errors: list[str] = field(default_factory=list)
    allowed: list[re.Pattern[str]] = field(default_factory=list)
    failed_loads: list[str] = field(default_factory=list)
    landed: str = ""

    @classmethod
    def new(cls, browser: Browser, base: str, **context_args: Any) -> Portal:
        """A fresh context (``storage_state=`` may bring a logged-in session's cookies)."""
        context = browser.new_context(viewport=DESKTOP, **context_args)
        context.add_init_script(INIT_SCRIPT)
        return cls(context, base)

    @classmethod
    def log_in(cls, browser: Browser, link: str) -> Portal:
        """A context logged in by opening a `tau portal --url` link; ``landed`` is where
        the link's redirect took the browser (the page asked for with --page)."""
        portal = cls.new(browser, link.split("/portal/", 1)[0])
        page = portal.page()
        resp = page.goto(link)
        assert resp is not None and resp.status == 200, resp and resp.status
        assert "/portal/login" not in page.url, page.url  # not sent back to log in
        assert any(c["name"] == "tau_session" for c in portal.context.cookies()), "no cookie"
        portal.landed = page.url.removeprefix(portal.base)
        page.close()
        portal.assert_clean()
        return portal

    def page(self) -> Page:
        page = self.context.new_page()
        page.on("console", lambda msg: self._console(page, msg))
        page.on("pageerror", lambda exc: self.errors.append(f"{page.url}: uncaught {exc}"))
        page.on("response", lambda r: self._response(page, r))
        return page

    def open(self, path: str) -> Page:
        """A new page on ``path``; it must answer 200 (no login page, no error)."""
        page = self.page()
        resp = page.goto(self.base + path)
        assert resp is not None and resp.status == 200, (path, resp and resp.status)
        assert "/portal/login" not in page.url, page.url
        return page

    def allow(self, pattern: str) -> None:
        """A console error this test provokes on purpose (say, the load of a 403 page)."""
        self.allowed.append(re.compile(pattern))

    def _console(self, page: Page, msg: ConsoleMessage) -> None:
        if msg.type not in ("error", "warning"):
            return
        text = msg.text
        if msg.type == "warning" and "Content Security Policy" not in text:
            return
        if not any(p.search(text) for p in self.allowed):
            where = msg.location.get("url") or "?"
            self.errors.append(f"{page.url}: console {msg.type}: {text} (at {where})")

    def _response(self, page: Page, resp: Response) -> None:
        if resp.status >= 400:  # Chromium's console line does not say which resource
            self.failed_loads.append(f"{resp.status} {resp.request.method} {resp.url}")

    def assert_clean(self) -> None:
        assert not self.errors, "\n".join([*self.errors, "responses over 399:", *self.failed_loads])


def wait_streams(page: Page, count: int) -> None:
    """Until htmx has opened ``count`` SSE streams on the page: a change made after this
    reaches the page."""
    # Polled from here: wait_for_function's string predicate is an eval in the page,
    # which the portal's CSP refuses (as it should) once the predicate must be polled.
    deadline = time.monotonic() + WAIT_MS / 1000
    while page.evaluate("window.__tau.sseOpen") < count:
        assert time.monotonic() < deadline, f"htmx opened fewer than {count} streams"
        page.wait_for_timeout(50)


def shot(page: Page, name: str, *, full_page: bool = True) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    # caret="initial": Playwright's default hides carets with an inline style on inputs,
    # which htmx's settling then copies, and the portal's CSP (rightly) refuses.
    page.screenshot(path=str(path), full_page=full_page, caret="initial")
    return path
