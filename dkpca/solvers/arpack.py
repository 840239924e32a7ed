"""ARPACK solver: ``scipy.sparse.linalg.eigsh`` (implicitly restarted Lanczos) on K~.

The centred operator is wrapped as a ``LinearOperator``, so K~ is never
formed; every ARPACK step is one product with a single vector -- one pass
over K.  That suits K in memory (the estimator) and is why ``dkpca.fit``
does not offer it out of core, where block Lanczos makes one pass per *block*.

With its default starting vector -- scikit-learn's, drawn by
``check_random_state(random_state).uniform(-1, 1, n)`` -- and ``which="LA"``
(largest *algebraic*, i.e. by value), a seeded solve runs the same ARPACK
iterations as scikit-learn's ``KernelPCA(eigen_solver="arpack")``.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from typing import Any

import numpy as np
from scipy.sparse.linalg import ArpackError, LinearOperator, eigsh
from sklearn.utils import check_random_state

from ..execution import serial_blas
from . import dense
from .result import Callback, EigResult, report

__all__ = ["solve", "start_vector", "SERIAL_MAX_N"]

#: largest n whose ARPACK solve runs on one BLAS thread.  ARPACK's steps between its one-vector
#: products are level-2 BLAS on n x ncv arrays; two OpenBLAS threads woken for each of them cost more
#: than they save.  Measured, ``dkpca.fit(X)`` at k = 10, d = 50, K in float32, each fit in a new
#: process (2-core AMD EPYC, 2026-11-24): n = 2,000 (10 fits each) solve 0.028-0.054 s on one
#: thread; on two 0.022-0.032 s in 4 fits and 0.092-0.114 s in 6.  n = 4,000 (5 each): 0.198-0.221 s
#: vs 0.126-0.227 s (even).  Above it ARPACK keeps the configured threads (not measured there: its
#: products, which stream K from memory, then dominate).
SERIAL_MAX_N = 4096


def start_vector(n: int, random_state: Any = None) -> np.ndarray:
    """scikit-learn's ARPACK starting vector, uniform in [-1, 1]^n.

    ``random_state`` is scikit-learn's (None, int or ``RandomState``); a
    numpy ``Generator`` draws the same distribution from itself.
    """
    if isinstance(random_state, np.random.Generator):
        return random_state.uniform(-1, 1, n)
    return check_random_state(random_state).uniform(-1, 1, n)


def solve(operator, k: int, *, tol: float = 0.0, max_passes: int | None = None, rng: Any = None,
          callback: Callback | None = None, v0: np.ndarray | None = None, maxiter: int | None = None) -> EigResult:
    """Top-``k`` eigenpairs of K~ (largest eigenvalues by value) by ARPACK.

    Parameters
    ----------
    operator : CenteredKernelOperator
        Anything with ``n`` and ``matmat(V) -> K~ V``.
    k : int
        Number of eigenpairs, ``k >= 1``; ARPACK cannot return all n, so ``k >= n`` is a dense eigh (below).
    tol : float, default=0
        ARPACK's relative accuracy of the Ritz values (0: machine precision).
    max_passes : int, optional
        Accepted for the common solver signature and not used: ARPACK's
        limit is ``maxiter``, counted in restarts (each of several products),
        and a limit in passes would stop it with nothing to return.
    rng : None, int, RandomState or Generator, optional
        Source of the default starting vector (:func:`start_vector`).
    callback : callable, optional
        Called once, with a :class:`~dkpca.solvers.PassReport` of the whole
        solve: ARPACK's reverse communication exposes no residual per pass.
    v0 : ndarray of shape (n,), optional
        Starting vector (default: ``start_vector(n, rng)``).
    maxiter : int, optional
        ARPACK's maximum number of iterations (scikit-learn's ``max_iter``;
        default: ARPACK's, 10 n).

    Returns
    -------
    EigResult
        ``passes`` counts every product, including the one that measures
        the residuals ``||K~ u - lambda u||``.

    Raises
    ------
    ValueError
        ``k < 1``.  ``k >= n`` is solved by the dense solver with scipy's RuntimeWarning, as ``eigsh`` does for
        scikit-learn's dense K.
    scipy.sparse.linalg.ArpackNoConvergence
        ``maxiter`` reached, as in scikit-learn.
    """
    n = operator.n
    if k < 1:
        raise ValueError(f"the arpack solver computes at least 1 component, {k} were asked for.")
    if k >= n:  # ARPACK cannot return all n: scipy's eigsh (scikit-learn's call) solves a dense K by eigh, and says so
        warnings.warn("k >= N for N * N square matrix. Attempting to use scipy.linalg.eigh instead.", RuntimeWarning,
                      stacklevel=2)
        return dense.solve(operator, k, callback=callback)
    t0 = time.perf_counter()
    start_passes = operator.passes
    v0 = start_vector(n, rng) if v0 is None else np.asarray(v0, dtype=np.float64)
    # A float32 K is solved in single precision, as scikit-learn's eigsh does
    # on its float32 K (and with tol=0 to float32's precision): each product
    # reads half the bytes, and ARPACK's float64 iteration could not converge
    # on single-precision products.
    dtype = np.float32 if getattr(operator, "dtype", np.float64) == np.float32 else np.float64
    single = dtype == np.float32

    def matmat(V: np.ndarray) -> np.ndarray:
        return operator.matmat(V, single=single).astype(dtype, copy=False)

    A = LinearOperator((n, n), matvec=lambda v: matmat(v.reshape(-1, 1)).ravel(), matmat=matmat, dtype=dtype)
    with serial_blas() if n <= SERIAL_MAX_N else contextlib.nullcontext():
        try:
            lam, U = eigsh(A, k, which="LA", tol=tol, maxiter=maxiter, v0=v0)
        except ArpackError as exc:
            if not str(exc).startswith("ARPACK error -9:"):  # "starting vector is zero": K~ v0 = 0 (scipy's
                raise                                           # ArpackError keeps the code only in its text)
            # K~ annihilates a random vector: it is zero (identical points, a kernel constant on them; the
            # centring of a constant K is exact). Every eigenvalue is 0 and any orthonormal basis is an
            # eigenbasis; the spectrum policy then drops them as numerically zero.
            lam, U = np.zeros(k, dtype=dtype), np.eye(n, k, dtype=dtype)
    lam, U = lam.astype(np.float64), U.astype(np.float64)
    residuals = np.linalg.norm(operator.matmat(U, single=single) - U * lam, axis=0)
    scale = max(abs(float(lam.max())), np.finfo(float).tiny)
    passes = operator.passes - start_passes
    history = [float(residuals.max() / scale)]
    report(callback, passes, history[-1], time.perf_counter() - t0)
    return EigResult(lam, U, passes=passes, residuals=residuals, converged=True, solver="arpack", history=history)
