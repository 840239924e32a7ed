"""Randomized subspace iteration with Rayleigh-Ritz every pass.

Halko, Martinsson & Tropp (2011), Alg. 4.4 / 5.3 for a symmetric operator,
with the Ritz step taken after every product so that the residuals of the
current eigenpair estimates -- ``||K~ u - theta u||``, available for free from
``Y = K~ Q`` -- decide when to stop.  One product = one pass over K.

Wanted are the k largest eigenvalues *by value*.  Subspace iteration on K~
converges to the eigenvectors of largest *magnitude*, which is the same thing
only for a positive semi-definite K~.  An indefinite kernel (sigmoid, or a
user's kernel) can have negative eigenvalues larger in magnitude than the
k-th positive one; plain iteration then fills the subspace with them.  The
Rayleigh-Ritz step ranks by value, so they are never returned; what they
cost is columns.  So each one the Ritz values witness gets a column of its
own (:func:`wanted_width`: the subspace widens by them, up to ``MAX_WIDENING``
times :func:`iteration_width`), and the wanted pairs converge at
``|lambda_{l+1}| / lambda_k`` as in the PSD case.  (On a sigmoid kernel
with 15 negative eigenvalues outranking lambda_6 = 0.0129: 16 -> 31 columns,
17 passes to a 1e-10 residual, where shifting took over 200.)  Only where
more would be needed does the iteration run on ``K~ + sigma I`` (see
:func:`next_shift`): same eigenvectors and Ritz vectors, eigenvalues moved
by sigma, and a spectrum whose largest magnitudes are again the largest
values -- but the whole unwanted spectrum, zeros included, then sits near
the wanted end, and convergence is slow.  Residuals ``||K~ u - theta u||``
depend on neither, so the stopping rule is unchanged; a PSD kernel neither
widens nor shifts: its iterations are exactly those of plain subspace
iteration.
"""

from __future__ import annotations

import time

import numpy as np
import scipy.linalg

from ..execution import row_blocks
from .result import DEFAULT_MAX_PASSES, Callback, EigResult, report
from .spectrum import operator_zero_threshold

__all__ = ["solve", "iteration_width", "block_size", "start_block", "next_shift", "wanted_width", "single_switch",
           "MAX_WIDENING", "SINGLE_RESIDUAL"]

#: an indefinite spectrum may widen the subspace up to this many times iteration_width's width
#: (:func:`wanted_width`); beyond, the iteration shifts instead (:func:`next_shift`)
MAX_WIDENING = 3

#: the products are single precision while the residual is above ``max(SINGLE_RESIDUAL, 100 tol)``
#: (:func:`single_switch`; the plan counts those passes: ``planning.modes.single_passes``)
SINGLE_RESIDUAL = 1e-4


def single_switch(tol: float) -> float:
    """The residual above which a pass multiplies in single precision: ``max(SINGLE_RESIDUAL, 100 tol)``."""
    return max(SINGLE_RESIDUAL, 1e2 * tol)


def iteration_width(n: int, k: int, oversampling: int | None = None) -> int:
    """Subspace width l: k plus max(10, k) extra vectors (capped at n)."""
    extra = max(10, k) if oversampling is None else oversampling
    return min(n, k + extra)


#: the former name of :func:`iteration_width` ("block" is the Gram tile; this is a width)
block_size = iteration_width


def start_block(n: int, ell: int, rng) -> np.ndarray:
    """Orthonormal Gaussian starting block (n x l) from an explicit generator."""
    rng = np.random.default_rng(rng)
    Q, _ = np.linalg.qr(rng.standard_normal((n, ell)))
    return Q


def next_shift(theta: np.ndarray, k: int, sigma: float) -> float:
    """Spectral shift for the next pass, from the current Ritz values (descending).

    The unwanted part of the spectrum is ``[lambda_min, lambda_{k+1}]``.  The
    single shift that makes its largest magnitude smallest centres it on 0,
    ``sigma* = -(lambda_min + lambda_{k+1}) / 2``; then every wanted
    ``lambda_i + sigma* > (lambda_{k+1} - lambda_min) / 2 >= |unwanted + sigma*|``,
    so the k wanted eigenvectors are the dominant ones and converge at a rate
    of at most ``(lambda_{k+1} + sigma) / (lambda_k + sigma) < 1`` (this
    centring is Wilkinson's optimal shift for the power method).  It is
    estimated with Ritz values: ``theta_min`` (the most negative one) and
    ``theta_{k+1}``.  The shift is used only where it is positive -- a
    negative eigenvalue's magnitude competes with the wanted ones -- so PSD
    kernels keep sigma = 0 (a negative shift would speed them up, but it
    relies on ``lambda_min``, which a subspace of the top of a PSD spectrum
    cannot estimate).  It is never lowered: once the negative end is damped
    the subspace may stop seeing it and ``theta_min`` rise, which is no
    reason to let it grow back.
    """
    # theta_{k+1}; without oversampling (l = k) the best estimate left is theta_k
    boundary = float(theta[min(k, theta.size - 1)])
    candidate = -0.5 * (float(theta[-1]) + boundary)
    # Below round-off of theta_1 a "negative" Ritz value is noise of a PSD spectrum.
    noise = 1e3 * np.finfo(float).eps * max(abs(float(theta[0])), np.finfo(float).tiny)
    return candidate if candidate > max(sigma, noise) else sigma


def wanted_width(theta: np.ndarray, k: int, ell: int, base: int) -> int:
    """Subspace width for the k wanted pairs, the eigenvalues that outrank them by magnitude, and oversampling.

    ``theta``: the current Ritz values, descending.  Subspace iteration keeps
    the ``l`` eigenvectors of largest magnitude; the Ritz values below
    ``-theta_k`` (more negative than the k-th wanted is positive) witness as
    many eigenvalues there (Cauchy interlacing), each one taking a column
    that the wanted pairs' oversampling needs: the width grows by them.  The
    result is at least ``ell`` (the width is never lowered) and ``base``
    (:func:`iteration_width`'s width); it is ``ell`` for a PSD spectrum.
    """
    noise = 1e3 * np.finfo(float).eps * max(abs(float(theta[0])), np.finfo(float).tiny)
    outranking = int(np.count_nonzero(theta < -max(float(theta[min(k, theta.size) - 1]), noise)))
    return max(ell, base + outranking)


def _rounding(operator) -> float:
    """The residual below which products with a float64 K cannot go: the rounding the zero rule allows
    (:func:`~dkpca.solvers.spectrum.zero_threshold`, ~u n c sqrt(n)); 0 where K is single precision or its
    centring is not known yet.

    Where centring cancels most of K (n c far above lambda_1), ``tol * theta_1`` can lie below it (in memory
    tol is 1e-10): 532 of 536 components of points 1e-8 apart ran the 500 passes allowed, ~1 s each.  A
    residual under it stops the iteration only once the Ritz values stand still too (within it, from one pass
    to the next): a first pass from a random block has small residuals of Ritz values near 0, not the top
    ones (a linear kernel on points at 1e6 stopped there, its two components of 2034 and 939 called zero).
    """
    if getattr(operator, "centering", None) is None or np.dtype(getattr(operator, "dtype", np.float64)) != np.float64:
        return 0.0
    return operator_zero_threshold(operator, 0.0)


def solve(operator, k: int, *, tol: float = 1e-6, max_passes: int = DEFAULT_MAX_PASSES, rng=None,
          callback: Callback | None = None, oversampling: int | None = None, start: np.ndarray | None = None,
          checkpoint=None, ritz: int = 0) -> EigResult:
    """Top-``k`` eigenpairs of K~ (largest eigenvalues by value) by subspace iteration.

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
    callback : callable, optional
        Called with a :class:`~dkpca.solvers.PassReport` after every pass.
    oversampling : int, optional
        Extra vectors beyond k (default max(10, k)).
    start : ndarray of shape (n, l), optional
        Orthonormal starting block (default: ``start_block(n, l, rng)``); the
        pipeline passes the block whose product it fused into the Gram build.
    checkpoint : dkpca.checkpoint.SolverCheckpoint, optional
        Where to save the state (next basis ``Q``, shift, passes, history) after
        every pass, and to resume from: a saved state of the same problem replaces
        ``start``, and its passes count towards ``max_passes`` (at least one
        new pass is made).  ``info["resumed_at_pass"]`` says where it resumed.
    ritz : int
        Also return the leading ``min(ritz, l)`` Ritz pairs of the last pass with their products,
        ``info["ritz"] = (theta, Q S, (K~ Q) S)``, when that pass was in float64 (exact; a grown fit's first
        product, :mod:`dkpca.growth`).

    Returns
    -------
    EigResult
        ``info`` holds ``block_size`` (the final subspace width; the key kept for stored
        reports), ``shift`` (the final sigma; 0 for a PSD spectrum) and ``lowest_ritz``
        (the lowest Ritz value seen: an upper bound on the lowest eigenvalue).
    """
    rng = np.random.default_rng(rng)
    # the algebra's tall products on every core, split by rows (one call each where BLAS has threads)
    rows = row_blocks()
    start_passes = operator.passes
    n = operator.n
    ell = base = iteration_width(n, k, oversampling)
    # an indefinite spectrum widens the subspace up to this before it shifts (see the module docstring)
    widest = min(n, MAX_WIDENING * base)
    history: list[float] = []
    resumed = 0
    sigma = 0.0
    lowest = np.inf
    state = checkpoint.load() if checkpoint is not None else None
    saved = state.arrays.get("Q", np.empty((0, 0))) if state is not None else None
    if saved is not None and saved.shape[0] == n and ell <= saved.shape[1] <= widest:  # widened subspaces resume too
        Q, history, resumed = saved, list(state.history), state.passes
        ell = Q.shape[1]
        sigma = float(state.arrays["shift"][0]) if "shift" in state.arrays else 0.0
    else:
        Q = start_block(n, ell, rng) if start is None else start
    theta, previous = np.zeros(ell), None
    res = np.full(k, np.inf)
    U = Q[:, :k]
    converged = False
    for _ in range(max(1, max_passes - resumed)):
        t0 = time.perf_counter()
        # Single-precision products while far from converged: their ~1e-6
        # relative error is corrected by the following passes, which switch to
        # float64 accumulation well before the residual reaches tol.
        single = not history or history[-1] > single_switch(tol)
        Y = operator.matmat(Q, single=single)
        Q_last = Q
        B = rows.inner(Q, Y)
        B = 0.5 * (B + B.T)
        theta, S = scipy.linalg.eigh(B)
        # descending by value: the wanted pairs are the k largest eigenvalues, not magnitudes
        theta, S = theta[::-1], S[:, ::-1]
        lowest = min(lowest, float(theta[-1]))  # Ritz values never pass the spectrum's ends
        U = rows.times(Q, S[:, :k])
        KU = rows.times(Y, S[:, :k])
        res = np.linalg.norm(KU - U * theta[:k], axis=0)
        scale = max(abs(theta[0]), np.finfo(float).tiny)
        history.append(float(res.max() / scale))
        rounding = _rounding(operator)
        still = previous is not None and float(np.abs(theta[:k] - previous).max(initial=0.0)) <= rounding
        converged = bool(history[-1] <= tol or (res.max() <= rounding and still))
        previous = theta[:k].copy()
        done = resumed + operator.passes - start_passes
        if not converged:
            # Next basis: an orthonormal basis of (K~ + sigma I) Q S (one step
            # of subspace iteration on the shifted operator; S only rotates
            # the basis), saved before the pass is reported so that a fit
            # killed after "pass N" resumes at pass N.  Also saved after the
            # last allowed pass: a rerun with a larger max_passes continues.
            wider = wanted_width(theta, k, ell, base)
            if not sigma and wider <= widest:
                # eigenvalues that outrank the wanted ones by magnitude get columns of their own: plain
                # iteration then converges at |lambda_{l+1}| / lambda_k, where a shift would put the whole
                # unwanted spectrum (zeros included) near the wanted end
                Z = rows.times(Y, S)
                if wider > ell:
                    Z = np.hstack([Z, rng.standard_normal((n, wider - ell))])
                    ell = wider
            else:
                sigma = next_shift(theta, k, sigma)
                Z = rows.times(Y, S)
                if sigma:
                    Z += sigma * rows.times(Q, S)
            Q, _ = scipy.linalg.qr(Z, mode="economic", check_finite=False)
            if checkpoint is not None:
                checkpoint.save(done, history, Q=Q, shift=np.array([sigma]))
        report(callback, done, history[-1], time.perf_counter() - t0)
        if converged:
            break
    info = {"block_size": ell, "shift": sigma, "lowest_ritz": lowest}
    if resumed:
        info["resumed_at_pass"] = resumed
    if ritz and history and not single:  # Q and Y are the last pass's: before the next basis replaced Q
        p = min(ritz, S.shape[1])
        info["ritz"] = (theta[:p].copy(), rows.times(Q_last, S[:, :p]), rows.times(Y, S[:, :p]))
    return EigResult(theta[:k].copy(), U, passes=resumed + operator.passes - start_passes, residuals=res,
                     converged=converged, solver="randomized", history=history, info=info)
