"""The web portal: server-rendered pages (Jinja2) with htmx and SSE for live parts.

It is part of the server layer and reads and acts through the same service and views
as the API (``RunService.for_caller``, ``server/views.py``): no query path or
authorization check of its own. ``pages`` draws, ``actions`` changes (CSRF-checked),
``live`` streams; ``web`` holds the templates and the security headers, ``charts`` the
SVG charts. The browser session is server/portal_session.py.
"""

from __future__ import annotations
