"""Block Lanczos / randomized block Krylov iteration with full reorthogonalisation.

Musco & Musco (2015), "Randomized Block Krylov Methods for Stronger and Faster
Approximate Singular Value Decomposition", Alg. 2, for a symmetric operator
K~, organised as a block Lanczos process so that every iteration is exactly
one product ``K~ @ V_j`` with an n x l panel (one pass over K; l is the
subspace width, ``FitPlan.width``):

* ``V_1`` is an orthonormal Gaussian n x l panel (or the pipeline's start block);
* pass j computes ``W = K~ V_j``; its coefficients ``H = [V_1 .. V_j]^T W``
  are the new column of panels of the projected matrix ``T = V^T K~ V``, block
  tridiagonal (``W`` is orthogonalised against the last two panels); the
  remainder ``R = W - V H`` gives the next panel ``V_{j+1} = orth(R)``, then
  orthogonalised once more against the whole basis (full reorthogonalisation:
  Gram-Schmidt twice, the first sweep only as wide as exact arithmetic needs);
* Rayleigh-Ritz on the Krylov basis: ``T = S diag(theta) S^T``, Ritz vectors
  ``U = V S``.  Because ``K~ V = V T + R E_j^T`` (the Krylov relation), the
  residuals ``||K~ u_i - theta_i u_i|| = ||R s_i^{(j)}||`` (``s_i^{(j)}`` the
  last l entries of ``s_i``) cost no extra pass.

After p passes the Ritz values come from the p*l-dimensional Krylov space
``span[V_1, K~ V_1, ..., K~^{p-1} V_1]`` rather than from the l-dimensional
``K~^{p-1} V_1`` of subspace iteration: convergence is governed by a
Chebyshev polynomial of the gap, so slowly decaying spectra need far fewer
passes (Musco & Musco: O(log n / sqrt(eps)) instead of O(log n / eps)).

Memory is the basis, ``n x max_basis`` float64 in the client; when it is full
the iteration is thick-restarted (Wu & Simon 2000): the best Ritz vectors are
kept, with the projected matrix ``diag(theta)``, and the Krylov relation stays
exact, so the residual formula still holds.

Products are float64 while the Ritz pairs are far from converged (an inexact
product is baked into T); late passes may multiply a float32 K in float32
under a bound the residuals then include (:mod:`dkpca.solvers.relaxed`).

Wanted are the k largest eigenvalues by value: Ritz values are ranked by
value, and thick restarts keep the leading ones by value.  A Krylov space
approximates both ends of the spectrum at once, so an indefinite K~ (large
negative eigenvalues) needs no shift here, unlike subspace iteration.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable

import numpy as np
import scipy.linalg

from ..execution import row_blocks
from ..linalg import RowBlocks, cholesky_qr, swept_orthonormal, top_eigh
from .randomized import iteration_width, start_block
from .relaxed import RELAX_BUDGET, Relaxation
from .result import DEFAULT_MAX_PASSES, Callback, EigResult, report
from .ritzsteps import cheap_ritz, worth_ritz

__all__ = ["solve", "default_width", "default_block", "default_max_basis", "OVERSAMPLING"]

#: client memory for the Krylov basis (plus as much again for its workspace)
BASIS_BYTES = 1 << 30

#: Columns of a panel beyond k.  Unlike subspace iteration, whose rate is
#: lambda_{l+1} / lambda_k, a Krylov space needs little room past k: every
#: pass adds l directions.  Measured on USPS (n = 7,291, poly-3, k = 256,
#: K in memory, Nystroem start of 2 l landmarks, tol 1e-6): width 266
#: (k + 10) 5 passes in 10.6 s, 320 5 passes in 13.2 s; from a random start
#: 266 took 7 passes in 15.3 s, 512 (subspace iteration's k + k) 5 in 24.5 s.
OVERSAMPLING = 10


def default_width(n: int, k: int) -> int:
    """Panel width l (the subspace width): k plus :data:`OVERSAMPLING` columns (capped at n)."""
    return iteration_width(n, k, OVERSAMPLING)


#: the former name of :func:`default_width` ("block" is the Gram tile; this is a width)
default_block = default_width


def default_max_basis(n: int, ell: int, budget: int = BASIS_BYTES) -> int:
    """Largest Krylov basis (columns) kept before a thick restart.

    At least ``3 l`` (restarts keep about half), at most ``n``, otherwise what
    fits in ``budget`` bytes of float64.
    """
    return int(min(n, max(3 * ell, budget // (8 * max(n, 1)))))


def _orthogonalise(near: np.ndarray, W: np.ndarray, rows: RowBlocks) -> tuple[np.ndarray, np.ndarray]:
    """``W - near H`` and ``H = near^T W``: one Gram-Schmidt sweep against the newest panels.

    In exact arithmetic ``K~ V_j`` is orthogonal to every panel but the last
    two (the block three-term recurrence), and after a thick restart to all
    but the kept Ritz vectors and the panels since: those are ``near``, and
    ``H`` is T's new column there (zero above).  What rounding leaves along
    the basis is at the level of ``eps ||K~||``, too little to matter in T;
    :func:`_next_panel` removes it from the next panel, where it would grow.
    """
    H = rows.inner(near, W)
    return W - rows.times(near, H), H


def _ritz(T: np.ndarray, want: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``want`` largest eigenpairs of the projected matrix, descending by value.

    Only those are computed where they are few (LAPACK's MRRR on a subset):
    measured 0.85 s against 2.2 s for all of a 1,862-square T.
    """
    m = T.shape[0]
    if 4 * want <= m:
        theta, S = top_eigh(T, want, driver="evr")
    else:
        theta, S = scipy.linalg.eigh(T, check_finite=False)
    # descending by value: the wanted pairs are the k largest eigenvalues, not magnitudes
    return theta[::-1], S[:, ::-1]


def _ritz_pairs(T: np.ndarray, W: np.ndarray, m: int, k: int, extra: int,
                slack: Callable[[np.ndarray], np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """``(theta, S, residuals, |theta_1|)``: T's leading Ritz pairs (the k wanted, or ``extra`` if more).

    By the Krylov relation ``K~ basis = basis T + W E_j^T`` the residual of
    Ritz pair i is ``||W s_i||`` over ``s_i``'s last panel (from row ``m``);
    ``slack(S)`` is added: what single-precision passes may hide (:meth:`~dkpca.solvers.relaxed.Relaxation.slack`).
    """
    theta, S = _ritz(T, min(T.shape[0], max(k, extra)))
    kk = min(k, theta.size)
    res = np.linalg.norm(W @ S[m:, :kk], axis=0) + slack(S[:, :kk])
    return theta, S, res, max(abs(theta[0]), np.finfo(float).tiny)


def _relative(res: np.ndarray, scale: float, k: int) -> float:
    """The largest relative residual; infinite while fewer than k pairs exist."""
    return float(res.max() / scale) if res.size == k else float("inf")


#: condition number of the remainder up to which its first orthonormalisation is an eigh of its Gram matrix
#: (:func:`_next_panel`); it loses ~eps cond^2 = 1e-8 of orthogonality, which the second sweep removes
SVQR_MAX_COND = 1e4


def _next_panel(R: np.ndarray, basis: np.ndarray, scale: float, rows: RowBlocks, single: bool = False) -> np.ndarray:
    """Orthonormal basis of the part of ``R`` not yet in the Krylov space.

    ``single``: R comes from a single-precision product, whose error along the older panels (~1e-7
    ||K~||, far above rounding) the first sweep left in it: R is swept against the whole basis first, or
    those directions would pass the rounding floor below and vanish in the second sweep (a Cholesky QR
    of an n = 300, width-70 space failed so).

    Twice: first ``R``'s own left singular vectors, then those swept once
    more against the whole basis and made orthonormal by a Cholesky QR
    ("twice is enough": the sweep in :func:`_orthogonalise` was the first
    against the basis, this is the second).

    The first step takes ``R``'s singular vectors from the l x l Gram matrix
    ``R^T R`` (GEMMs and a small eigh) where ``R`` is well conditioned
    (:data:`SVQR_MAX_COND`); measured on USPS (n = 7,291, width 266, poly-3
    k = 256 and rbf k = 64) its condition number was 3-154 at every pass.
    Otherwise -- near an invariant subspace, or with every direction at
    rounding level (1e3 eps ||K~||) -- a Householder QR of the tall
    ``R`` plus an SVD of its small factor finds them, and directions whose
    weight is at rounding level, which carry no new information and would
    only add noise to T, are dropped.  Measured on USPS (k = 256, 7 calls):
    the Householder QR alone took 0.11-0.16 s a call, the Gram way 0.03 s.

    The tall algebra here runs on numpy's BLAS, as the products and GEMMs
    around it do: numpy and scipy bring two OpenBLAS libraries, and one's
    threads spin for a while after each call on the cores the other's next
    call wants (measured: scipy's QR of a 7,291 x 266 panel took 0.23 s
    right after a numpy GEMM, 0.08 s after a scipy one).
    """
    if single and basis.shape[1]:
        R = _orthogonalise(basis, R, rows)[0]
    w, Ub = np.linalg.eigh(rows.inner(R, R))
    sv = np.sqrt(np.maximum(w[::-1], 0.0))
    # Kept directions have weight above 1e3 eps ||K~||, so the rounding left
    # of R along the basis (eps ||K~||) comes out of Q = R (..)^-1 at most
    # ~1e-3 large, which the sweep below removes.
    floor = 1e3 * np.finfo(float).eps * max(scale, sv[0] if sv.size else 0.0)
    if sv.size and sv[-1] > floor and sv[-1] * SVQR_MAX_COND >= sv[0]:
        Q = rows.times(R, Ub[:, ::-1]) / sv
    else:
        Q, Rf = np.linalg.qr(R)
        Ub, sv, _ = np.linalg.svd(Rf)
        Q = Q @ Ub[:, :int(np.sum(sv > floor))]
    if Q.shape[1] and basis.shape[1]:
        # Measured on USPS (k = 256, 7 passes, interleaved in one process): the
        # solver's time outside its products 14.2-16.0 s with two sweeps against
        # the whole basis before the QR, 9.0-12.1 s with this one after it.
        Q = swept_orthonormal(Q, basis, rows)
    return Q


def solve(operator, k: int, *, tol: float = 1e-6, max_passes: int | None = DEFAULT_MAX_PASSES, rng=None,
          callback: Callback | None = None, width: int | None = None, max_basis: int | None = None,
          start: np.ndarray | None = None, checkpoint=None, block: int | None = None, ritz: int = 0,
          relaxed: bool = True) -> EigResult:
    """Top-``k`` eigenpairs of K~ (largest eigenvalues by value) by block Lanczos.

    Parameters
    ----------
    operator : CenteredKernelOperator
        Anything with ``n`` and ``matmat(V) -> K~ V`` (V of shape (n, l)).
    k : int
        Number of eigenpairs.
    tol : float
        Stop when every ``||K~ u_i - theta_i u_i|| <= tol * theta_1`` (i <= k).
    max_passes : int
        Upper bound on products with K~ (each is one pass over K).
    rng : numpy.random.Generator or int, optional
        Source of the starting block.
    callback : callable, optional
        Called with a :class:`~dkpca.solvers.PassReport` after every pass.
    width : int, optional
        Panel width l, the subspace width (default :func:`default_width`: ``k + 10``).
    max_basis : int, optional
        Krylov basis columns kept in memory before a thick restart (default
        :func:`default_max_basis`: what fits in 1 GiB, at least ``3 l``).
    start : ndarray of shape (n, l), optional
        Orthonormal starting block (the pipeline passes the start block whose
        product it fused into the Gram build).
    checkpoint : dkpca.checkpoint.SolverCheckpoint, optional
        Where to save, after every pass, a thick-restart state -- the best
        ``min(2 l, basis)`` Ritz vectors ``U``, their values ``theta`` and the
        next panel ``V`` (n x 3l floats, not the whole basis) -- and to resume
        from: the run then continues as after a restart, its passes counting
        towards ``max_passes``; ``info["resumed_at_pass"]`` says where.

    Returns
    -------
    EigResult
        ``info`` holds ``block_size`` (the width l; the key kept for stored reports),
        ``basis_size`` (final Krylov dimension), ``max_basis`` and ``restarts``.
    block : int, optional
        Deprecated: the former name of ``width`` (a FutureWarning).
    ritz : int
        Also return the leading ``ritz`` Ritz pairs (fewer if the basis is smaller) with their exact
        products, ``info["ritz"] = (theta, U, K~ U)``: ``K~ U = U diag(theta) + W S_last`` by the Krylov
        relation, no extra pass (a grown fit's first product, :mod:`dkpca.growth`).
    relaxed : bool
        Late passes multiply in float32 where ``operator.single_error`` bounds such a product's error and
        the bound they add to the residuals stays under a tenth of ``tol`` (:mod:`dkpca.solvers.relaxed`); the
        residuals include that bound, and ``info["single_passes"]`` counts them.  False: all in float64.
    """
    n = operator.n
    max_passes = DEFAULT_MAX_PASSES if max_passes is None else int(max_passes)
    given = "width"
    if block is not None:
        if width is not None:
            raise TypeError("block is the former name of width; pass width only.")
        warnings.warn("lanczos.solve's block= was renamed width= (the subspace width; a block is a Gram tile); "
                      "block= will be removed.", FutureWarning, stacklevel=2)
        width, given = block, "block"
    if not 1 <= k <= n:
        raise ValueError(f"k={k} is invalid; it must be between 1 and n={n}.")
    ell = default_width(n, k) if width is None else iteration_width(n, k, max(0, int(width) - k))
    if width is not None and int(width) < k:
        raise ValueError(f"{given}={width} is invalid; it must be at least k={k}.")
    cap = default_max_basis(n, ell) if max_basis is None else int(min(n, max_basis))
    if cap < min(n, k + ell):
        raise ValueError(f"max_basis={max_basis} is too small; it must be at least k + width = {k + ell}.")
    start_passes = operator.passes
    # the algebra's tall products on every core, split by rows (one call each where BLAS has threads)
    rows = row_blocks()
    V = start_block(n, ell, rng) if start is None else np.asarray(start, dtype=np.float64)
    if V.shape != (n, ell):
        raise ValueError(f"start must have shape ({n}, {ell}); got {V.shape}.")

    # Column-major storage with room for the largest basis: appending a panel
    # writes only its own columns (np.hstack copied the whole basis every
    # pass), and untouched columns cost no memory.
    space = np.empty((n, max(cap, 2 * ell) + ell), order="F")
    basis = space[:, :0]
    T = np.zeros((0, 0))
    history: list[float] = []
    resumed = 0
    state = checkpoint.load() if checkpoint is not None else None
    if state is not None and {"U", "theta", "V"} <= set(state.arrays):
        Us, ths, Vs = state.arrays["U"], state.arrays["theta"], state.arrays["V"]
        if Us.shape[0] == n and Vs.shape[0] == n and Us.shape[1] == ths.size >= k and Vs.shape[1] >= 1:
            # A saved thick-restart state: K~ U = U diag(theta) + (terms in span V).
            space[:, :Us.shape[1]] = Us
            basis, T, V = space[:, :Us.shape[1]], np.diag(ths), Vs
            history, resumed = list(state.history), state.passes
    scale: float | None = None  # |theta_1|, from the latest Ritz pairs
    converged = False
    restarts = 0
    # where the previous panel starts: the newest panels a product is orthogonalised against first
    local_from = 0
    ritz_cost: tuple[float, int] | None = None  # the latest Ritz step: seconds, T's order
    saved = state.arrays.get("slack") if state is not None and basis.shape[1] else None
    relax = Relaxation(operator, ell, space.shape[1], enabled=relaxed, saved=saved)
    # the previous pass's remainder (its next panel's source): a single pass takes T's coupling to the previous
    # panel from it (that panel's own product), not from its own float32 product
    R_prev: np.ndarray | None = None
    for _ in range(max(1, max_passes - resumed)):
        t0 = time.perf_counter()
        # relaxed: a late pass multiplies in float32 (see the module), only right after a pass that made V
        # (not after a restart or a resume: the coupling to the kept vectors is not a panel's product), nor where
        # the panel completes the space, whose Ritz pairs are then exact only from float64 products
        single = R_prev is not None and basis.shape[1] + V.shape[1] < n and relax.single(history, scale, tol)
        W = operator.matmat(V, single=True) if single else operator.matmat(V)
        if single:
            relax.record(basis.shape[1], basis.shape[1] + V.shape[1])
        product_seconds = time.perf_counter() - t0
        # The new panel joins the basis; T gains V_j's row and column.
        m = basis.shape[1]
        space[:, m:m + V.shape[1]] = V
        basis = space[:, :m + V.shape[1]]
        W, H = _orthogonalise(basis[:, local_from:], W, rows)
        if single:  # the previous panel's coupling from its own (float64) product: Q_prev^T K V = R_prev^T V
            H = H.copy()
            H[:m - local_from] = rows.inner(R_prev, V)
        T = np.pad(T, ((0, V.shape[1]), (0, V.shape[1])))
        T[local_from:, m:] = H
        T[m:, local_from:] = H.T
        T[m:, m:] = 0.5 * (H[m - local_from:] + H[m - local_from:].T)
        local_from = m
        done = resumed + operator.passes - start_passes
        # the whole space is spanned: the Ritz pairs are exact
        full = basis.shape[1] >= n
        # This pass's Ritz pairs, where they can decide something: T's
        # eigenproblem grows with the basis (0.73 s of a 0.4 s product at
        # USPS's 8th pass), and a pass whose residual cannot reach tol only
        # reports it.  A checkpoint, a restart and the last pass need them.
        due = (scale is None or checkpoint is not None or full or done >= max_passes
               or basis.shape[1] + ell > cap or cheap_ritz(ritz_cost, T.shape[0], product_seconds)
               or worth_ritz(history, tol))
        # A pass that would skip them makes its next panel first: if there is
        # none (no new direction: an invariant subspace), its Ritz pairs are
        # exact and due after all.
        nxt = None if due else _next_panel(W, basis, scale, rows, single)
        due = due or nxt.shape[1] == 0
        if due:
            t1 = time.perf_counter()
            theta_all, S, res, scale = _ritz_pairs(T, W, m, k, max(ritz, 2 * ell if checkpoint is not None else 0),
                                                   relax.slack)
            relax.observe(S[:, :res.size], scale)
            ritz_cost = (time.perf_counter() - t1, T.shape[0])
        history.append(_relative(res, scale, k) if due else float("nan"))
        converged = due and res.size == k and history[-1] <= tol
        stop = converged or full
        if not stop:
            V = _next_panel(W, basis, scale, rows, single) if nxt is None else nxt
            stop = V.shape[1] == 0
            R_prev = W
        if not stop and checkpoint is not None:
            # saved before the pass is reported: a fit killed after "pass N" resumes at pass N
            keep = min(basis.shape[1], 2 * ell)
            extra = {"slack": relax.slack(S[:, :keep])} if relax.active else {}
            checkpoint.save(done, history, U=rows.times(basis, S[:, :keep]), theta=theta_all[:keep], V=V, **extra)
        report(callback, done, history[-1], time.perf_counter() - t0)
        if stop:
            # a whole space or an invariant one makes the Ritz pairs exact -- of T, which single passes made inexact
            converged = converged or (res.size == k and not relax.active)
            break
        if due and relax.level > RELAX_BUDGET * tol and history[-1] - relax.level <= tol < history[-1] \
                and done < max_passes:
            # The single passes' bound, measured, is past its budget (a pair weighs more on their panels than
            # its residual predicted) and is all that keeps the residuals above tol, for good: start again from
            # the Ritz vectors as a new start block, T from their float64 product, every later product float64.
            if S.shape[1] < ell:
                theta_all, S = _ritz(T, ell)
            V = cholesky_qr(rows.times(basis, S[:, :ell]), rows)  # Ritz vectors: orthonormal but for rounding
            basis, T, local_from, R_prev = space[:, :0], np.zeros((0, 0)), 0, None
            relax.withdraw()
            restarts += 1
            continue
        if basis.shape[1] + V.shape[1] > cap:
            # Thick restart: keep the leading Ritz vectors; K~ U_keep = U_keep
            # diag(theta) + W (B s) terms, all inside span[U_keep, V], so the
            # Krylov relation (and the residual formula) survive unchanged.
            keep = max(res.size, min(basis.shape[1], cap - V.shape[1]) // 2)
            if S.shape[1] < keep:
                theta_all, S = _ritz(T, keep)
            relax.fold(S[:, :keep])  # the kept vectors carry the single panels' bound
            space[:, :keep] = rows.times(basis, S[:, :keep])
            basis = space[:, :keep]
            R_prev = None  # the next pass is coupled to the kept vectors, not to a panel
            T = np.diag(theta_all[:keep])
            restarts += 1
            local_from = 0  # K~ V is not orthogonal to the kept Ritz vectors
    p = min(ritz, S.shape[1])
    Up = rows.times(basis, S[:, :max(res.size, p)])  # the wanted Ritz vectors and the recorded ones, one product
    theta, U = theta_all[:res.size].copy(), np.ascontiguousarray(Up[:, :res.size])
    info = {"block_size": ell, "basis_size": int(basis.shape[1]), "max_basis": cap, "restarts": restarts,
            "single_passes": relax.count}
    if resumed:
        info["resumed_at_pass"] = resumed
    if ritz:
        info["ritz"] = (theta_all[:p].copy(), Up[:, :p], Up[:, :p] * theta_all[:p] + rows.times(W, S[m:, :p]))
    return EigResult(theta, U, passes=resumed + operator.passes - start_passes, residuals=res,
                     converged=bool(converged), solver="lanczos", history=history, info=info)
