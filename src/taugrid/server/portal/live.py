"""Server-sent events of the portal: "something you can see moved" from the ordered event
feed, and a run's log lines as they are written.

Both are async generators on the event loop that hold no thread while they wait (the
feed's reads and the log's reads go to the thread pool one at a time), woken by
``RunChanges`` the moment a run moves. htmx's SSE extension turns a ``change`` into a
refresh of the fragment that listens for it, and appends each ``line`` event to the log.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from html import escape
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from taugrid.server.changes import ANY
from taugrid.server.portal.access import Viewer, viewer

router = APIRouter(prefix="/portal", include_in_schema=False)
KEEPALIVE_S = 15.0  # a comment this often: a closed tab is noticed, proxies keep the stream
COALESCE_S = 0.2  # a burst of moves (a sweep finishing) is one refresh
MAX_LINE_CHARS = 4000  # a longer line is cut in the browser's copy (the file keeps it)
LINES_PER_EVENT = 200
SSE_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}

Seen = Annotated[Viewer, Depends(viewer)]


def sse(event: str, data: str) -> bytes:
    """One SSE message; each line of ``data`` its own ``data:`` field."""
    lines = "".join(f"data: {line}\n" for line in data.split("\n"))
    return f"event: {event}\n{lines}\n".encode()


@router.get("/stream/changes")
async def changes(request: Request, who: Seen, run: str | None = None) -> StreamingResponse:
    """A ``change`` event whenever the feed has events of runs the caller may see (of
    ``run`` only, when given), and one as soon as it connects; its data is the moved runs'
    ids."""
    svc = who.svc
    target = (await run_in_threadpool(svc.get, run))["id"] if run else None
    start = await run_in_threadpool(svc.event_feed_head)

    async def stream() -> AsyncIterator[bytes]:
        after = start
        yield b": connected\n\n"
        # The page was drawn before this stream began (or a dropped stream reconnected):
        # what moved in between has no event here, so the listeners refresh once now.
        yield sse("change", target or "")
        while not await request.is_disconnected():
            moved = await svc.engine.changes.wait(target or ANY, KEEPALIVE_S)
            if not moved:
                yield b": keepalive\n\n"
                continue
            await asyncio.sleep(COALESCE_S)
            found = await run_in_threadpool(svc.event_feed, after, 1000)
            if found:
                after = found[-1]["id"]
                ids = sorted({e["run_id"] for e in found if target in (None, e["run_id"])})
                if ids:
                    yield sse("change", " ".join(ids))

    return StreamingResponse(stream(), media_type="text/event-stream", headers=SSE_HEADERS)


@router.get("/runs/{ref}/logs/stream")
async def log_lines(
    ref: str,
    request: Request,
    who: Seen,
    attempt: Annotated[int | None, Query(ge=0)] = None,
    rank: Annotated[int | None, Query(ge=0)] = None,
    q: str = "",
    follow: bool = True,
    tail: Annotated[int, Query(ge=0, le=100_000)] = 2000,
) -> StreamingResponse:
    """The log as ``line`` events of escaped HTML (the lines containing ``q``, case
    ignored, when given), then one ``done`` event when the attempt has ended."""
    follower = who.svc.log_follower()
    req = await run_in_threadpool(follower.request, ref, attempt, tail, follow, rank)
    needle = q.lower()

    async def stream() -> AsyncIterator[bytes]:
        yield b": connected\n\n"
        rest = b""
        async for chunk in follower.stream(req):
            rest += chunk
            *lines, rest = rest.split(b"\n")
            out = _shown(lines, needle)
            for i in range(0, len(out), LINES_PER_EVENT):
                yield sse("line", "".join(out[i : i + LINES_PER_EVENT]))
            if await request.is_disconnected():
                return
        out = _shown([rest] if rest else [], needle)
        if out:
            yield sse("line", "".join(out))
        yield sse("done", f'<p class="log-end">log ended {time.strftime("%H:%M:%S")}</p>')

    return StreamingResponse(stream(), media_type="text/event-stream", headers=SSE_HEADERS)


def _shown(lines: list[bytes], needle: str) -> list[str]:
    """Each line an escaped ``.ln`` span; a span is a block, so the spans of an event are
    joined with nothing (a newline between them would show, in the <pre>, as a blank line)."""
    out = []
    for raw in lines:
        text = raw.decode("utf-8", "replace").rstrip("\r")
        if needle and needle not in text.lower():
            continue
        if len(text) > MAX_LINE_CHARS:
            text = text[:MAX_LINE_CHARS] + " [...]"
        out.append(f'<span class="ln">{escape(text)}</span>')
    return out
