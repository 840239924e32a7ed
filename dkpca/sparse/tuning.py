"""Choosing sigma^2 for a wanted number of representing kernels (:func:`choose_noise_variance`)."""

from __future__ import annotations

import math
import numbers
import warnings
from typing import Any

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from .estimator import SparseKernelPCA, read_whole, resolve_kernel

__all__ = ["choose_noise_variance"]

#: the message :meth:`SparseKernelPCA.fit` raises when sigma^2 leaves no kernel
_ALL_ZERO = "every weight went to zero"


def choose_noise_variance(
    X: Any,
    target_kernels: int,
    *,
    max_evals: int = 40,
    lower: float | None = None,
    upper: float | None = None,
    **params: Any,
) -> float:
    """sigma^2 giving ``target_kernels`` representing kernels, by bisection on log sigma^2.

    The number of representing kernels falls as sigma^2 grows (it is zero
    once sigma^2 exceeds the largest eigenvalue of ``K / n``), though not
    always strictly; the bisection keeps the evaluated sigma^2 whose count is
    closest to the target (exact when reached).

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
    target_kernels : int
        Wanted number of representing kernels (1 <= target <= n_samples).
    max_evals : int, default=40
        Fits at most.
    lower, upper : float, optional
        Initial bracket; default ``upper = mean k(x, x)`` (no kernel survives
        above it) and ``lower = upper * 1e-4`` (halved until enough survive).
    **params
        Other :class:`SparseKernelPCA` parameters (kernel, gamma, update, ...).

    Returns
    -------
    noise_variance : float
    """
    Xa = np.asarray(read_whole(X), dtype=np.float64)
    if Xa.ndim != 2:
        raise ValueError(f"X must be 2-D (n_samples, n_features); got shape {Xa.shape}.")
    n = Xa.shape[0]
    if not isinstance(target_kernels, numbers.Integral) or not 1 <= target_kernels <= n:
        raise ValueError(f"target_kernels={target_kernels!r} is invalid; it must be an integer in [1, {n}].")
    params = {k: v for k, v in params.items() if k != "noise_variance"}
    params.setdefault("n_components", None)
    kernel = resolve_kernel(SparseKernelPCA(**params), Xa.shape[1])
    if upper is None:
        upper = float(np.mean(kernel.diag(Xa, np.float64)))
    if lower is None:
        lower = upper * 1e-4
    if not 0 < lower < upper:
        raise ValueError(f"need 0 < lower < upper; got lower={lower}, upper={upper}.")

    seen: dict[float, int] = {}

    def count(s2: float) -> int:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                m = int(SparseKernelPCA(**{**params, "noise_variance": s2}).fit(Xa).representing_indices_.size)
        except ValueError as exc:
            if _ALL_ZERO not in str(exc):
                raise
            m = 0
        seen[s2] = m
        return m

    lo, hi = float(lower), float(upper)
    evals = 0
    while count(lo) < target_kernels and evals < max_evals:
        hi, lo = lo, lo / 2.0
        evals += 1
    while evals < max_evals:
        mid = math.sqrt(lo * hi)
        m = count(mid)
        evals += 1
        if m == target_kernels or hi / lo < 1.0 + 1e-6:
            break
        if m > target_kernels:
            lo = mid
        else:
            hi = mid
    best = min(seen, key=lambda s2: (abs(seen[s2] - target_kernels), -s2))
    return float(best)
