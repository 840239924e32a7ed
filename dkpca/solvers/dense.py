"""Dense solver: ``scipy.linalg.eigh`` on the materialised K~ (small n only)."""

from __future__ import annotations

import numpy as np
import scipy.linalg

from . import EigResult


def solve(operator, k: int, *, tol: float = 0.0, max_passes: int | None = None, rng=None) -> EigResult:
    """Top-``k`` eigenpairs of K~ by a full symmetric eigendecomposition.

    Reads K once (one pass) and holds K~ in memory: O(n^2) memory.
    """
    Kc = operator.dense()
    n = Kc.shape[0]
    lam, U = scipy.linalg.eigh(Kc, subset_by_index=(n - k, n - 1), overwrite_a=True, check_finite=False)
    # eigh's own backward error bounds the residual; report it for uniformity.
    residuals = np.full(k, np.finfo(np.float64).eps * max(abs(lam[-1]), 1.0) * np.sqrt(n))
    return EigResult(lam, U, passes=1, residuals=residuals, converged=True, solver="dense")
