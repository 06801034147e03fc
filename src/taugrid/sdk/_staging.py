"""Copy mode's staging buffers: private copies of the caller's buffers. Stdlib only.

A staging buffer is an anonymous private ``mmap``, so it starts on a page boundary: the
writer sends it to disk with O_DIRECT straight from memory (``_writer.write_direct``), with
no second copy through bounce buffers, which halves the memory traffic of the background
write (what slows the training loop while a save is in flight). Each buffer is kept after
its save, keyed by file name, and reused by the next save of the same name and size: the
first save pays for faulting in fresh memory (about a second per GiB on a VM), the next
ones only for the copy. Unused ones are unmapped when a save finishes without them.

Only one save uses the pool at a time (the writer slot in ``_writer`` serializes them).
"""

from __future__ import annotations

import contextlib
import itertools
import mmap
import os
import threading

PAGE = mmap.PAGESIZE
COPY_SLICE = 64 << 20  # below this per thread, one plain copy is as fast
pool: dict[str, mmap.mmap] = {}  # staging buffers of the last save, by file name


def capacity(nbytes: int) -> int:
    """Bytes mapped for a buffer of ``nbytes``: whole pages, at least one."""
    return max(PAGE, -(-nbytes // PAGE) * PAGE)


def is_pooled(rel: str, nbytes: int) -> bool:
    """Whether staging ``nbytes`` under ``rel`` would reuse memory (no new allocation)."""
    buf = pool.get(rel)
    return buf is not None and len(buf) == capacity(nbytes)


def take(rel: str, nbytes: int) -> mmap.mmap:
    """The pooled buffer of ``rel`` if it has the right size, else a fresh one."""
    buf = pool.pop(rel, None)
    if buf is not None:
        if len(buf) == capacity(nbytes):
            return buf
        _unmap(buf)  # resized: give the old size back before mapping the new one
    if not hasattr(mmap, "MAP_PRIVATE"):  # Windows: anonymous memory, never forked
        return mmap.mmap(-1, capacity(nbytes))
    return mmap.mmap(-1, capacity(nbytes), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)


def keep(used: dict[str, mmap.mmap]) -> None:
    """After a save: keep the buffers it used, drop (unmap) the others."""
    dropped = [buf for rel, buf in pool.items() if used.get(rel) is not buf]
    pool.clear()
    pool.update(used)
    for buf in dropped:
        _unmap(buf)


def _unmap(buf: mmap.mmap) -> None:
    with contextlib.suppress(BufferError):  # still exported: unmapped with its last view
        buf.close()


def copy_into(dst: mmap.mmap | bytearray, src: memoryview) -> None:
    """``dst[:len(src)] = src`` on several cores: a memoryview copy holds the GIL,
    ctypes.memmove releases it, so slices copy in parallel threads. Falls back to one
    plain copy for small or read-only sources, or without ctypes."""
    n = src.nbytes
    workers = min(os.cpu_count() or 1, 4, n // COPY_SLICE)
    if workers < 2 or src.readonly:
        memoryview(dst)[:n] = src
        return
    try:
        import ctypes
    except ImportError:  # pragma: no cover - CPython always has it
        memoryview(dst)[:n] = src
        return
    dst_c = (ctypes.c_char * n).from_buffer(dst)
    src_c = (ctypes.c_char * n).from_buffer(src)
    try:
        d0, s0 = ctypes.addressof(dst_c), ctypes.addressof(src_c)
        bounds = [n * i // workers for i in range(workers + 1)]
        threads = [
            threading.Thread(target=ctypes.memmove, args=(d0 + lo, s0 + lo, hi - lo))
            for lo, hi in itertools.pairwise(bounds)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        del dst_c, src_c  # release the exports before anyone resizes or unmaps
