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
#: bumped by :func:`retire`; a thread whose buffers are older drops them
_generation = [0]


#: alignment of every scratch buffer: what O_DIRECT file I/O requires
ALIGN = 4096


def scratch(purpose: str, shape: tuple[int, ...], dtype) -> np.ndarray:
    """A C-contiguous, page-aligned array of ``shape``/``dtype`` owned by the calling thread.

    The contents are undefined.  The same ``purpose`` on the same thread
    returns a view of the same memory, so two live arrays need two purposes.
    """
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape)) * dtype.itemsize
    tidy()
    bufs = _local.bufs
    buf = bufs.get(purpose)
    if buf is None or buf.nbytes < nbytes:
        raw = np.empty(max(nbytes, 1) + ALIGN, dtype=np.uint8)
        off = -raw.ctypes.data % ALIGN
        buf = bufs[purpose] = raw[off:off + max(nbytes, 1)]
    return buf[:nbytes].view(dtype).reshape(shape)


def tidy() -> None:
    """Drop this thread's buffers if :func:`retire` was called since they were made.

    :func:`scratch` does it; so does a read of a stored block, which maps
    the block without a buffer, so that retired buffers go before a pass's
    first block is mapped in beside them.
    """
    if getattr(_local, "generation", None) != _generation[0]:  # also a thread's first call: no generation yet
        _local.bufs = {}
        _local.generation = _generation[0]


def retire() -> None:
    """Every thread of this process drops its buffers at its next :func:`tidy` (every :func:`scratch` call).

    For the end of a phase whose buffers the next phase does not use: a
    Gram build's blocks (64 MiB a thread at block 4000 in float32) would
    otherwise stay allocated through every pass, whose blocks are mapped
    from the page cache -- at n = 20,000 they were a fifth of the fit's
    peak memory.  Threads of a pool cannot be reached one by one; each
    notices when it next asks for a buffer (:func:`tidy`: a pass's first block read).
    """
    _generation[0] += 1
