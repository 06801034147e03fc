"""Serve a file the artifact store opened (``ports.artifacts.OpenedFile``).

Opening it safely is the store's business (``executors.local.safe_open`` for the local
disk: a workload can swap a directory for a symlink while the server serves it); what is
streamed here is that open file, up to the size it had when opened.
"""

from __future__ import annotations

from fastapi.responses import StreamingResponse

from taugrid.ports.artifacts import OpenedFile


def file_response(opened: OpenedFile) -> StreamingResponse:
    """Stream an opened file and close it. The length is the file's when opened; a file
    the workload is still appending to is served up to that length, never more than
    declared."""
    return StreamingResponse(
        opened.chunks(),
        media_type="application/octet-stream",
        headers={"content-length": str(opened.size)},
    )
