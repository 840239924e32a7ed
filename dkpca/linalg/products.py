"""Block products with K and the tree sums that gather them.

A symmetric K is visited one upper-triangular block ``K_IJ`` (I <= J) at a
time; each block contributes ``K_IJ V_J`` to row block I and ``K_IJ^T V_I``
to row block J (:func:`block_products`), so a pass reads every stored block
exactly once.  :func:`scatter_sum` adds the contributions landing in each row
block inside the task graph.
"""

from __future__ import annotations

from typing import Any

import dask
import numpy as np

from .grid import STRIP_ROWS, block_bounds, rows_per_block
from .workspace import scratch

__all__ = ["block_products", "add", "tree_sum", "scatter_sum", "dense_rows", "kernel_product"]


def block_products(blk: np.ndarray, VI: np.ndarray, VJ: np.ndarray,
                   symmetric_pair: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """``(blk @ VJ, blk.T @ VI)`` in float64 (the second is None on the diagonal).

    ``V`` in float32 asks for a single-precision product (solvers use it for
    early passes, whose errors later passes correct): no widening, half the
    GEMM cost.  Otherwise a float32 block is widened strip by strip into a
    reused buffer, so the product is exactly that of ``fl32(K)`` in float64.
    """
    bi, bj = blk.shape
    if VI.dtype == np.float32 and blk.dtype == np.float32:
        yI = (blk @ VJ).astype(np.float64)
        return yI, (blk.T @ VI).astype(np.float64) if symmetric_pair else None
    yI = np.empty((bi, VJ.shape[1]), dtype=np.float64)
    yJ = np.zeros((bj, VI.shape[1]), dtype=np.float64) if symmetric_pair else None
    if blk.dtype == np.float64:
        np.matmul(blk, VJ, out=yI)
        if symmetric_pair:
            np.matmul(blk.T, VI, out=yJ)
        return yI, yJ
    for s in range(0, bi, STRIP_ROWS):
        e = min(s + STRIP_ROWS, bi)
        strip = scratch("op-strip", (e - s, bj), np.float64)
        np.copyto(strip, blk[s:e])
        np.matmul(strip, VJ, out=yI[s:e])
        if symmetric_pair:
            yJ += strip.T @ VI[s:e]
    return yI, yJ


def add(*parts: np.ndarray) -> np.ndarray:
    """Sum of arrays of one shape (a new array; the inputs are not modified)."""
    out = parts[0].copy()
    for p in parts[1:]:
        out += p
    return out


def tree_sum(parts: list, fan_in: int = 8) -> Any:
    """Lazy sum of delayed arrays in a tree of ``fan_in``-way additions.

    A partial result is freed as soon as it has been added, so memory stays a
    few operands per worker however many parts there are.
    """
    while len(parts) > 1:
        parts = [dask.delayed(add, pure=True)(*parts[i:i + fan_in]) for i in range(0, len(parts), fan_in)]
    return parts[0]


def scatter_sum(pairs: list[tuple[int, int]], tasks: list, nb: int, fan_in: int = 8) -> list:
    """Per row block R, the lazy sum of every block product landing in R.

    ``tasks[i]`` is a 2-output delayed ``(K_IJ V_J, K_IJ^T V_I)`` for
    ``pairs[i] = (I, J)``; memory stays O(n l) plus a few blocks per worker,
    instead of holding all nb^2 / 2 partial products until the end.
    """
    contrib: list[list] = [[] for _ in range(nb)]
    for (I, J), t in zip(pairs, tasks, strict=True):
        contrib[I].append(t[0])
        if I != J:
            contrib[J].append(t[1])
    return [tree_sum(parts, fan_in) for parts in contrib]


def as_dense(part: Any) -> np.ndarray:
    """A slice of a numpy / zarr / h5py / scipy sparse / dask array, as dense float64."""
    if hasattr(part, "toarray"):
        part = part.toarray()
    elif hasattr(part, "compute"):
        part = part.compute()
    return np.asarray(part, dtype=np.float64)


def dense_rows(Y: Any, start: int, stop: int) -> np.ndarray:
    """Rows ``start:stop`` of a numpy / zarr / h5py / scipy sparse / dask array, as dense float64."""
    return as_dense(Y[start:stop])


def kernel_product(kernel: Any, X: np.ndarray, Y: Any, W: np.ndarray,
                   rows: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(K(X, Y) @ W, K(X, Y) @ 1)`` in float64, holding one ``len(X) x rows`` kernel block at a time.

    ``Y`` (n x d, any array-like with row slicing) is read in row blocks of
    ``rows`` (default: sized by :func:`~dkpca.linalg.grid.rows_per_block`);
    ``kernel`` is anything with dkpca's ``block(X, Y, dtype, out)``.  This is
    the one blocked "kernel times a matrix" loop: projections of new points,
    the estimator's transform and the pre-image sums all run through it.
    """
    X = np.ascontiguousarray(X, dtype=np.float64)
    m, n = X.shape[0], Y.shape[0]
    rows = rows or rows_per_block(m)
    KW = np.zeros((m, W.shape[1]))
    ksum = np.zeros(m)
    for j0, j1 in block_bounds(n, rows):
        Kx = kernel.block(X, dense_rows(Y, j0, j1), np.float64, out=scratch("kernel-product", (m, j1 - j0),
                                                                              np.float64))
        KW += Kx @ W[j0:j1]
        ksum += Kx.sum(axis=1)
    return KW, ksum
