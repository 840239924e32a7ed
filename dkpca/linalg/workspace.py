"""Per-thread reusable scratch buffers.

Gram blocks are tens of MiB.  glibc serves allocations that large with fresh
``mmap`` pages and returns them on free, so a new temporary per block costs a
page fault per 4 KiB -- measured here to cut zarr reads and dtype conversions
of a 4096^2 block from ~1 GB/s to ~0.3 GB/s.  Each worker thread therefore
keeps one buffer per purpose and reuses it for every block it handles.
"""

from __future__ import annotations

import threading

import numpy as np

_local = threading.local()


#: alignment of every scratch buffer: what O_DIRECT file I/O requires
ALIGN = 4096


def scratch(purpose: str, shape: tuple[int, ...], dtype) -> np.ndarray:
    """A C-contiguous, page-aligned array of ``shape``/``dtype`` owned by the calling thread.

    The contents are undefined.  The same ``purpose`` on the same thread
    returns a view of the same memory, so two live arrays need two purposes.
    """
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape)) * dtype.itemsize
    bufs = getattr(_local, "bufs", None)
    if bufs is None:
        bufs = _local.bufs = {}
    buf = bufs.get(purpose)
    if buf is None or buf.nbytes < nbytes:
        raw = np.empty(max(nbytes, 1) + ALIGN, dtype=np.uint8)
        off = -raw.ctypes.data % ALIGN
        buf = bufs[purpose] = raw[off:off + max(nbytes, 1)]
    return buf[:nbytes].view(dtype).reshape(shape)


def release() -> None:
    """Drop this thread's buffers (e.g. after a fit, to return memory)."""
    _local.bufs = {}
