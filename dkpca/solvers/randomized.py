"""Randomized subspace iteration with Rayleigh-Ritz every pass.

Halko, Martinsson & Tropp (2011), Alg. 4.4 / 5.3 for a symmetric operator,
with the Ritz step taken after every product so that the residuals of the
current eigenpair estimates -- ``||K~ u - theta u||``, available for free from
``Y = K~ Q`` -- decide when to stop.  One product = one pass over K.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg

from . import EigResult, report_pass


def block_size(n: int, k: int, oversampling: int | None = None) -> int:
    """Subspace width l: k plus max(10, k) extra vectors (capped at n)."""
    extra = max(10, k) if oversampling is None else oversampling
    return min(n, k + extra)


def start_block(n: int, ell: int, rng) -> np.ndarray:
    """Orthonormal Gaussian starting block (n x l) from an explicit generator."""
    rng = np.random.default_rng(rng)
    Q, _ = np.linalg.qr(rng.standard_normal((n, ell)))
    return Q


def solve(operator, k: int, *, tol: float = 1e-6, max_passes: int = 60, rng=None,
          oversampling: int | None = None, start: np.ndarray | None = None,
          checkpoint=None) -> EigResult:
    """Top-``k`` eigenpairs of K~ by subspace iteration.

    Parameters
    ----------
    operator : CenteredKernelOperator
    k : int
        Number of eigenpairs.
    tol : float
        Stop when every ``||K~ u_i - theta_i u_i|| <= tol * theta_1`` (i <= k).
    max_passes : int
        Upper bound on products with K~.
    rng : numpy.random.Generator
        Source of the starting block (explicit, for reproducibility).
    oversampling : int, optional
        Extra vectors beyond k (default max(10, k)).
    start : ndarray of shape (n, l), optional
        Orthonormal starting block (default: ``start_block(n, l, rng)``); the
        pipeline passes the block whose product it fused into the Gram build.
    checkpoint : dkpca.checkpoint.SolverCheckpoint, optional
        Where to save the state (next basis ``Q``, passes, history) after every
        pass, and to resume from: a saved state of the same problem replaces
        ``start``, and its passes count towards ``max_passes`` (at least one
        new pass is made).  ``info["resumed_at_pass"]`` says where it resumed.

    Returns
    -------
    EigResult
    """
    rng = np.random.default_rng(rng)
    start_passes = operator.passes
    n = operator.n
    ell = block_size(n, k, oversampling)
    history: list[float] = []
    resumed = 0
    state = checkpoint.load() if checkpoint is not None else None
    if state is not None and state.arrays.get("Q", np.empty(0)).shape == (n, ell):
        Q, history, resumed = state.arrays["Q"], list(state.history), state.passes
    else:
        Q = start_block(n, ell, rng) if start is None else start
    theta = np.zeros(ell)
    res = np.full(k, np.inf)
    U = Q[:, :k]
    converged = False
    for _ in range(max(1, max_passes - resumed)):
        # Single-precision products while far from converged: their ~1e-6
        # relative error is corrected by the following passes, which switch to
        # float64 accumulation well before the residual reaches tol.
        single = not history or history[-1] > max(1e-4, 1e2 * tol)
        Y = operator.matmat(Q, single=single)
        B = Q.T @ Y
        B = 0.5 * (B + B.T)
        theta, S = scipy.linalg.eigh(B)
        theta, S = theta[::-1], S[:, ::-1]
        U = Q @ S[:, :k]
        KU = Y @ S[:, :k]
        res = np.linalg.norm(KU - U * theta[:k], axis=0)
        scale = max(abs(theta[0]), np.finfo(float).tiny)
        history.append(float(res.max() / scale))
        converged = history[-1] <= tol
        if not converged:
            # Next basis: an orthonormal basis of K~ Q (one subspace-iteration
            # step), saved before the pass is reported so that a fit killed
            # after "pass N" resumes at pass N.  Also saved after the last
            # allowed pass: a rerun with a larger max_passes continues.
            Q, _ = scipy.linalg.qr(Y @ S, mode="economic", check_finite=False)
            if checkpoint is not None:
                checkpoint.save(resumed + operator.passes - start_passes, history, Q=Q)
        report_pass(operator, history[-1], resumed + operator.passes - start_passes)
        if converged:
            break
    info = {"block_size": ell}
    if resumed:
        info["resumed_at_pass"] = resumed
    return EigResult(theta[:k].copy(), U, passes=resumed + operator.passes - start_passes, residuals=res,
                     converged=converged, solver="randomized", history=history, info=info)
