"""Tall-skinny products by row blocks over a thread map: a solver's algebra between passes on every core.

An iterative solver's algebra between passes -- ``A^T B`` and ``A S`` with
``A``, ``B`` n x m and n x l, ``S`` small -- is O(n m l) on one BLAS
thread (``execution.serial_blas``: narrow blocks' multi-threaded BLAS spins
on the cores the passes need).  Split by rows, each part is an independent
single-threaded GEMM, run on the process's kept thread pool: on p cores
the algebra takes about 1/p of its time, without BLAS threads of its own.

``inner`` sums the parts' ``A_r^T B_r`` in row order (the same order
whatever thread finishes first: deterministic for a given thread count),
which differs from one GEMM by rounding only (the same terms, summed in
another order: ~eps sqrt(n/parts) relative); ``times`` writes each row
block of ``A S`` (the same dot products as one GEMM).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

__all__ = ["RowBlocks", "MIN_PART_ROWS", "MIN_PART_FLOPS"]

#: rows a part has at least (a part's rows stream through its core's cache)
MIN_PART_ROWS = 4096

#: multiply-adds a part has at least (~5-10 ms of one core): smaller products stay one call.  Measured on the
#: shared 2-core machine (benchmarks/algebra.py, BLAS on one thread, load ~8 from other processes): at
#: n = 20,000, k = 10 (parts of ~2 ms) the split algebra took 0.89-0.78x the speed of one call; at n = 100,000
#: its Lanczos algebra 1.06-1.8x faster.  Rerun it on a quiet or larger machine before lowering this.
MIN_PART_FLOPS = 16_000_000


class RowBlocks:
    """``A^T B`` and ``A S`` split into row blocks over ``map`` (one call each without one).

    ``map(fn, items)`` runs ``fn`` on each item, concurrently (a thread
    pool's ``map``); ``threads`` is how many run at once.
    """

    def __init__(self, map_: Callable[[Callable, Iterable], Iterable] | None = None, threads: int = 1) -> None:
        self.map = map_
        self.threads = max(1, int(threads)) if map_ is not None else 1

    def parts(self, n: int, work: float) -> list[tuple[int, int]]:
        """Row ranges for an n-row product of ``work`` multiply-adds: one per thread where it pays, else one."""
        count = int(min(self.threads, n // MIN_PART_ROWS, work // MIN_PART_FLOPS))
        if count <= 1:
            return [(0, n)]
        edges = np.linspace(0, n, count + 1).astype(int)
        return list(zip(edges[:-1].tolist(), edges[1:].tolist(), strict=True))

    def inner(self, A: np.ndarray, B: np.ndarray) -> np.ndarray:
        """``A.T @ B`` (A n x m, B n x l)."""
        parts = self.parts(A.shape[0], float(A.shape[0]) * A.shape[1] * B.shape[1])
        if len(parts) == 1:
            return A.T @ B
        partial = list(self.map(lambda r: A[r[0]:r[1]].T @ B[r[0]:r[1]], parts))
        out = partial[0]
        for p in partial[1:]:
            out += p
        return out

    def times(self, A: np.ndarray, S: np.ndarray) -> np.ndarray:
        """``A @ S`` (A n x m, S m x l)."""
        parts = self.parts(A.shape[0], float(A.shape[0]) * A.shape[1] * S.shape[1])
        if len(parts) == 1:
            return A @ S
        out = np.empty((A.shape[0], S.shape[1]), dtype=np.result_type(A, S))

        def rows(r: tuple[int, int]) -> None:
            np.matmul(A[r[0]:r[1]], S, out=out[r[0]:r[1]])

        list(self.map(rows, parts))
        return out
