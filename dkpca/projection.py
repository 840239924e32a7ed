"""Projections of new rows on the components: the one loop, a bounded kernel block at a time.

:func:`project_blocks` is the loop every projection runs: rows of new
points a block at a time, each block's kernel products with the projection
weights (whatever computes them), centred by
:meth:`~dkpca.linalg.Centering.center_scores`.  ``dkpca.fit``'s model
(:meth:`dkpca.model.KPCAModel.transform`, products over the store's data
copy: :func:`project_stored`) and :class:`dkpca.KernelPCA` fitted in memory (:func:`project`,
products with ``X_fit`` held in memory) both call it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import dask
import dask.array as da
import numpy as np
import scipy.sparse as sp

from .kernels import Kernel, NonFiniteKernelError, largest_value
from .linalg import Centering, ProjectionWeights, block_bounds, kernel_product, rows_per_block
from .storage import FitStore

__all__ = ["check_temporary", "gone_store", "kernel_diag", "project_blocks", "project_rows", "project",
           "project_stored"]

#: ``products(rows) -> (K(rows, X_fit) @ W, row means of K(rows, X_fit))`` for a block of new rows
Products = Callable[[Any], tuple[np.ndarray, np.ndarray]]


def kernel_diag(Xb: np.ndarray, kernel: Kernel) -> np.ndarray:
    """k(x, x) for the rows of ``Xb`` (a map_blocks function: the diagonal of a stored fit's K, block by block)."""
    return kernel.diag(Xb, np.float64)


def project_blocks(X: Any, weights: ProjectionWeights, centering: Centering, products: Products,
                   step: int) -> tuple[np.ndarray, np.ndarray]:
    """``(Z, mean_k)``: the centred scores of the rows of X and their kernel rows' means, ``step`` rows at a time.

    The one projection loop.  ``products`` holds at most one kernel block of
    ``step`` rows (the caller sizes it with :func:`~dkpca.linalg.rows_per_block`);
    the centring costs O(k) per row from the precomputed ``weights``.
    """
    m = X.shape[0]
    Z = np.empty((m, weights.W.shape[1]), dtype=np.float64)
    mean_k = np.empty(m, dtype=np.float64)
    for s0, s1 in block_bounds(m, step):
        KW, mean_k[s0:s1] = products(X[s0:s1])
        if not (np.isfinite(KW).all() and np.isfinite(mean_k[s0:s1]).all()):  # else NaN scores, without a word
            raise _not_finite(X[s0:s1])
        Z[s0:s1] = centering.center_scores(KW, mean_k[s0:s1], weights)
    return Z, mean_k


def _not_finite(rows: Any) -> NonFiniteKernelError:
    """The refusal of finite rows whose kernel values against the training rows overflow (an rbf of values near
    1e200: inf - inf in the squared distance), naming their magnitude: a damaged input reads as huge numbers."""
    return NonFiniteKernelError.of("the kernel of rows of X with the model's training rows", "of this model",
                                   largest_value("their", rows), "check those rows (a damaged input reads as huge "
                                   "numbers), or refit with other kernel parameters")


def project_rows(X: Any, X_fit: Any, weights: ProjectionWeights, centering: Centering, evaluator: Kernel | None,
                 kernel_dtype: Any) -> np.ndarray:
    """In-memory projections of the rows of X (:func:`project_blocks` with kernel blocks against ``X_fit``).

    ``evaluator=None``: X already holds the kernel rows ``K(X, X_fit)``
    (``kernel="precomputed"``).  Used as is for numpy input and blockwise
    (``map_blocks``) for dask input.
    """
    def products(Xb: Any) -> tuple[np.ndarray, np.ndarray]:
        if evaluator is None:
            Kx = np.asarray(Xb.toarray() if sp.issparse(Xb) else Xb, dtype=np.float64)
        else:
            Kx = evaluator.block(Xb, X_fit, kernel_dtype)
        return Kx @ weights.W, Kx.mean(axis=1)

    return project_blocks(X, weights, centering, products, rows_per_block(weights.W.shape[0]))[0]


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


def check_temporary(temporary: Any) -> None:
    """Refuse a model whose temporary store ``close()`` removed (a lazy result computed after it, too: it said
    the store did not exist, "fit a model first").  On a worker ``temporary`` is the path: nothing to check."""
    if getattr(temporary, "removed", False):
        raise ValueError("this model's temporary store was removed by close(); refit it, or fit with "
                         "store='path.dkpca.zarr' to keep a model.")


def gone_store(path: str) -> str:
    """What a fitted model (or estimator) says of its store when nothing is there any more."""
    return (f"store {path!r}, where this model's training rows are, no longer exists (moved or deleted since the "
            "model was fitted or loaded): load the model from where the store is now (dkpca.load(path)), or refit.")


def project_stored(Xb: np.ndarray, store: FitStore, block: int, n: int, bound: str | None, kernel: Kernel,
                   weights: ProjectionWeights, centering: Centering, temporary: Any = None,
                   block_info: dict | None = None) -> np.ndarray:
    """Rows ``[z(x) | mean(k(x)) | k(x, x)]`` for a block of new points against a store's data copy.

    The map_blocks function of :meth:`dkpca.model.KPCAModel.transform`: :func:`project_blocks` projects a
    user's dask chunk of any height a few rows at a time (one kernel block of the budget
    :func:`~dkpca.linalg.rows_per_block` sizes per task), against the model's own rows of the data copy
    (``n`` rows, bound to the model by ``bound``: its ``data_digest``).  A non-finite row is an error
    naming it: a kernel block with one NaN row would make every score of the block NaN.  ``temporary`` is
    checked here (removed by ``close()``: refused), and being in the graph, it keeps a temporary store alive as
    long as the lazy result that reads it.
    """
    check_temporary(temporary)
    Xb = np.ascontiguousarray(Xb, dtype=np.float64)
    bad = ~np.isfinite(Xb).all(axis=1)
    if bad.any():
        (start, stop), rows = block_info[0]["array-location"][0] if block_info else (0, len(Xb)), len(Xb)
        row = start + int(np.argmax(bad))
        # the blocks are checked in whatever order they run: "first" only of all rows when this block is all of them
        where = (f"first in row {row}" if block_info is None or block_info[0]["shape"][0] == rows else
                 f"in row {row}, the first of rows {start} to {stop - 1}")
        raise ValueError(f"X contains NaN or infinity ({where}); remove or impute non-finite values before "
                         "transform.")
    try:
        training = store.training_array(n, bound)  # the model's own rows (an update may have grown the copy since)
    except FileNotFoundError:
        if not store.is_new():
            raise
        raise FileNotFoundError(gone_store(store.path)) from None

    def products(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        KW, ksum = kernel_product(kernel, rows, training, weights.W, rows=block)
        return KW, ksum / n

    Z, mean_k = project_blocks(Xb, weights, centering, products, rows_per_block(block))
    return np.column_stack([Z, mean_k, kernel.diag(Xb) if len(Xb) else np.empty(0)])
