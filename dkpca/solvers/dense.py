"""Dense solver: ``scipy.linalg.eigh`` on the materialised K~ (small n only)."""

from __future__ import annotations

import time

import numpy as np

from ..linalg import top_eigh
from .result import Callback, EigResult, report

__all__ = ["solve"]


def solve(operator, k: int, *, tol: float = 0.0, max_passes: int | None = None, rng=None,
          callback: Callback | None = None) -> EigResult:
    """Top-``k`` eigenpairs of K~ by value, by a full symmetric eigendecomposition.

    Reads K once (one pass) and holds K~ in memory: O(n^2) memory.  ``tol``,
    ``max_passes`` and ``rng`` are accepted for the common solver signature;
    a direct solver needs none of them.
    """
    t0 = time.perf_counter()
    Kc = operator.dense()
    n = Kc.shape[0]
    # the k largest by value, ascending (eigh's order); K~ is formed again only where LAPACK's subset fails
    lam, U = top_eigh(Kc, k, again=operator.dense)
    # eigh's own backward error bounds the residual (eps ||K~|| sqrt(n)); report it for uniformity.  Relative to
    # the largest eigenvalue: a K~ of all zeros (constant data) has residual 0, not eps sqrt(n) / tiny = 1e292
    scale = max(abs(lam[-1]), np.finfo(np.float64).tiny) if k else 1.0
    residuals = np.full(k, np.finfo(np.float64).eps * scale * np.sqrt(n))
    history = [float(residuals.max() / scale)] if k else [0.0]
    report(callback, 1, history[-1], time.perf_counter() - t0)
    return EigResult(lam, U, passes=1, residuals=residuals, converged=True, solver="dense", history=history)
