"""What a stored fit needs on disk, counted before anything is written, and the refusal when it will not fit."""

from __future__ import annotations

import errno
from typing import Any

import numpy as np

from ..linalg.grid import block_bounds, n_blocks
from ..machine import cores
from .fitstore import FitStore

__all__ = ["InsufficientDiskSpace", "gram_bytes", "fit_footprint", "check_disk_space", "FILE_OVERHEAD"]


class InsufficientDiskSpace(OSError):
    """The Gram store would not fit in the free space of its filesystem."""

    def __str__(self) -> str:  # the message alone: OSError's "[Errno 28] " prefix says nothing to a user
        return str(self.strerror)


def gram_bytes(n: int, block: int, dtype: Any) -> int:
    """Bytes on disk of the upper-triangular blocks of K (uncompressed)."""
    bounds = block_bounds(n, block)
    itemsize = np.dtype(dtype).itemsize
    return sum((i1 - i0) * (j1 - j0) * itemsize for a, (i0, i1) in enumerate(bounds) for (j0, j1) in bounds[a:])


#: what one file costs beyond its bytes: filesystems allocate whole 4 KiB blocks
FILE_OVERHEAD = 4096


def fit_footprint(n: int, d: int, block: int, dtype: Any, ell: int, data_itemsize: int = 8,
                  concurrent: int | None = None) -> int:
    """Bytes a stored fit needs on disk: K, its sums and markers, the data copy, model, checkpoints, temporaries.

    ``ell`` is the solver's subspace width (checkpoints hold two slots of a
    few n x ell arrays); ``concurrent`` writers each hold one temporary chunk
    file at a time (default: this machine's cores, twice for O_DIRECT).
    """
    itemsize = np.dtype(dtype).itemsize
    nb = n_blocks(n, block)
    k_files = nb * (nb + 1) // 2
    parts = {
        "K": gram_bytes(n, block, dtype) + k_files * FILE_OVERHEAD,
        "partial_sums": nb * n * 8 + nb * nb * FILE_OVERHEAD,
        "done_markers": 2 * nb * nb * FILE_OVERHEAD,  # K's and the sums
        "diag_and_row_sums": n * (itemsize + 8) + 2 * nb * FILE_OVERHEAD,
        "data_copy": n * d * data_itemsize + nb * FILE_OVERHEAD,
        "model": n * (ell + 1) * 8 + 2 * nb * FILE_OVERHEAD,
        "checkpoints": 2 * 3 * n * ell * 8 + 6 * nb * FILE_OVERHEAD,
        "temporaries": 2 * (concurrent or cores()) * block * block * itemsize,
        "metadata": 64 * FILE_OVERHEAD,
    }
    return int(sum(parts.values()))


def check_disk_space(store: FitStore, needed: int) -> None:
    """Raise :class:`InsufficientDiskSpace` if ``needed`` bytes will not fit at the store."""
    free = store.free_bytes()
    if free is not None and needed > free:
        raise InsufficientDiskSpace(
            errno.ENOSPC,
            f"the fit's store needs {needed / 1e9:.3g} GB (K, its sums and markers, the data copy, model, checkpoints "
            f"and temporaries) but {store.path!r} has {free / 1e9:.3g} GB free; "
            "choose a store on a larger filesystem (store=..., CLI: --store), use dtype='float32' (--dtype float32), "
            "or gram='recompute' (--gram recompute), which stores no Gram matrix",
        )
