"""The k largest eigenpairs of a symmetric matrix in memory, by LAPACK's subset solver with a fallback."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import scipy.linalg

__all__ = ["top_eigh"]


def top_eigh(A: np.ndarray, k: int, *, driver: str | None = None,
             again: Callable[[], np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(eigenvalues, eigenvectors)``: A's ``k`` largest by value, ascending (``scipy.linalg.eigh``'s order).

    Only those k are computed (``subset_by_index``), but LAPACK's subset
    solver can return fewer -- none, measured on a centred rbf kernel of
    unscaled pixel values, within 1e-5 of the identity -- and then the full
    decomposition gives them.  With ``again`` (which makes A anew) A is
    overwritten by the first try, so no copy of it is held.
    """
    n = A.shape[0]
    lam, U = scipy.linalg.eigh(A, subset_by_index=(n - k, n - 1), overwrite_a=again is not None,
                               check_finite=False, driver=driver)
    if lam.size < k:
        B = A if again is None else again()
        lam, U = scipy.linalg.eigh(B, overwrite_a=again is not None, check_finite=False)
        lam, U = lam[n - k:], U[:, n - k:]
    return lam, U
