"""Kernel blocks for sparse kernel PCA: evaluation in float64 and centring.

Centring (``center=True``; the paper does not centre, its footnote 1) replaces
K by ``K~ = K - r 1^T - 1 r^T + c 1 1^T`` with ``r`` the row means of K over
the training points and ``c`` their mean (:mod:`dkpca.linalg.centering`).  :func:`center` is the
one place in :mod:`dkpca.sparse` that applies this formula, to blocks and
diagonals of K alike.
"""

from __future__ import annotations

import numpy as np

from ..kernels import Kernel
from ..linalg import center_block, center_diagonal, default_block_size, kernel_product

__all__ = ["CenterStats", "center", "kernel_block", "mean_kernel"]

#: ``(r_rows, r_cols, c)``: row means of K for a block's rows and columns, and the grand mean
CenterStats = tuple[np.ndarray, np.ndarray, float]


def center(K: np.ndarray, stats: CenterStats | None, diagonal: bool = False) -> np.ndarray:
    """``K~`` from ``K`` (in place for a block): :func:`dkpca.linalg.center_block` / ``center_diagonal``.

    Parameters
    ----------
    K : ndarray
        A block ``K[R, C]`` of shape (|R|, |C|), or with ``diagonal=True`` the
        values ``k(x_j, x_j)`` (shape (|R|,), ``r_rows`` and ``r_cols`` both
        the points' row means).
    stats : (r_rows, r_cols, c) or None
        ``None``: no centring, ``K`` is returned as it is.
    diagonal : bool, default=False
    """
    if stats is None:
        return K
    r_rows, r_cols, c = stats
    return center_diagonal(K, r_rows, r_cols, c) if diagonal else center_block(K, r_rows, r_cols, c)


def kernel_block(kernel: Kernel, XR: np.ndarray, XC: np.ndarray, stats: CenterStats | None,
                 same: bool = False) -> np.ndarray:
    """``K[R, C]`` in float64, centred when ``stats`` is given.

    ``same=True`` says ``XC is XR`` (the kernel may use the symmetry).
    """
    K = kernel.block(XR, None if same else XC, np.float64)
    return center(K, stats)


def mean_kernel(kernel: Kernel, X: np.ndarray, X_fit: np.ndarray) -> np.ndarray:
    """``mean_j k(x, x_j)`` over the training points ``X_fit``, block by block (never |X| x n)."""
    n = X_fit.shape[0]
    if X.shape[0] == 0:
        return np.zeros(0)
    # the one blocked kernel-times-matrix loop, with no columns: only its row sums are wanted
    return kernel_product(kernel, X, X_fit, np.empty((n, 0)), rows=default_block_size(n))[1] / n
