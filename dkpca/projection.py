"""The in-memory estimator's projections: new rows on the components, a bounded kernel block at a time.

:class:`dkpca.KernelPCA` fitted in memory holds ``X_fit`` and its centring;
these functions compute ``z(x)`` for numpy, sparse or dask rows from them
(the out-of-core estimator and ``dkpca.fit``'s model project through
:meth:`dkpca.model.KPCAModel.transform`, which reads the store's data copy).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import dask
import dask.array as da
import numpy as np
import scipy.sparse as sp

from .kernels import Kernel
from .linalg import Centering, ProjectionWeights, rows_per_block

__all__ = ["kernel_diag", "project_rows", "project"]


def kernel_diag(Xb: np.ndarray, kernel: Kernel) -> np.ndarray:
    """k(x, x) for the rows of ``Xb`` (a map_blocks function: the diagonal of a stored fit's K, block by block)."""
    return kernel.diag(Xb, np.float64)


def project_rows(X: Any, X_fit: Any, weights: ProjectionWeights, centering: Centering, evaluator: Kernel | None,
                 kernel_dtype: Any) -> np.ndarray:
    """In-memory projections of the rows of X, a kernel block of bounded size at a time.

    ``evaluator=None``: X already holds the kernel rows ``K(X, X_fit)``
    (``kernel="precomputed"``).  Used as is for numpy input and blockwise
    (``map_blocks``) for dask input.
    """
    out = np.empty((X.shape[0], weights.W.shape[1]), dtype=np.float64)
    step = rows_per_block(weights.W.shape[0])
    for s in range(0, X.shape[0], step):
        Xb = X[s:s + step]
        if evaluator is None:
            Kx = np.asarray(Xb.toarray() if sp.issparse(Xb) else Xb, dtype=np.float64)
        else:
            Kx = evaluator.block(Xb, X_fit, kernel_dtype)
        out[s:s + step] = centering.center_scores(Kx @ weights.W, Kx.mean(axis=1), weights)
    return out


def project(X: Any, X_fit: Any, weights: ProjectionWeights, centering: Centering, evaluator: Kernel | None,
            kernel_dtype: Any) -> Any:
    """:func:`project_rows` of a validated numpy/sparse X, or lazily per row chunk of a dask X (X's chunks)."""
    rows = partial(project_rows, evaluator=evaluator, kernel_dtype=kernel_dtype)
    if not isinstance(X, da.Array):
        return rows(X, X_fit, weights, centering)
    # fitted arrays enter the graph once, as snapshots: a refit does not change a lazy result
    fitted = [dask.delayed(a, pure=True) for a in (X_fit, weights, centering)]
    return X.map_blocks(rows, *fitted, dtype=np.float64, chunks=(X.chunks[0], (weights.W.shape[1],)),
                        meta=np.empty((0, 0)))
